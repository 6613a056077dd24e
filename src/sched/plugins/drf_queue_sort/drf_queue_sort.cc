#include "sched/plugins/drf_queue_sort/drf_queue_sort.h"

namespace aicloud::sched {
namespace {

class DrfQueueSort final : public QueueSortPlugin {
 public:
  std::string_view Name() const override { return "drf_queue_sort"; }
  bool Less(const QueuedPod& a, const QueuedPod& b) const override {
    if (a.pod->priority != b.pod->priority) return a.pod->priority > b.pod->priority;
    if (a.queue_share != b.queue_share) return a.queue_share < b.queue_share;
    return a.enqueue_seq < b.enqueue_seq;
  }
};

}  // namespace

void RegisterDrfQueueSort(Registry& r) {
  (void)r.Register("drf_queue_sort", [](const PluginArgs&) -> StatusOr<std::unique_ptr<Plugin>> {
    return std::unique_ptr<Plugin>(new DrfQueueSort());
  });
}

}  // namespace aicloud::sched
