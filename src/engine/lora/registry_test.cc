#include "engine/lora/registry.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <cmath>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

#include "engine/lora/random_adapter.h"
#include "engine/model/model_test_util.h"

namespace aicloud::engine {
namespace {

namespace fs = std::filesystem;

using testing::TempDir;  // engine/model/model_test_util.h

ModelConfig Base() {
  ModelConfig c;
  c.architecture = "LlamaForCausalLM";
  c.model_type = "llama";
  c.hidden_size = 16;
  c.num_hidden_layers = 2;
  c.num_attention_heads = 4;
  c.num_key_value_heads = 2;
  c.head_dim = 4;
  c.intermediate_size = 24;
  c.vocab_size = 32;
  c.max_position_embeddings = 64;
  return c;
}

// Writes adapters named `names` (rank 4, q and v) under tmp.
void WriteAdapters(const fs::path& tmp, std::initializer_list<const char*> names) {
  uint64_t seed = 1;
  for (const char* n : names) {
    ASSERT_TRUE(InitRandomLora(tmp / n, Base(), {.rank = 4, .seed = seed++}).ok());
  }
}

std::unique_ptr<LoraRegistry> Make(int32_t max_loras) {
  StatusOr<std::unique_ptr<LoraRegistry>> r =
      LoraRegistry::Create(Base(), {.base_model = "tiny", .max_loras = max_loras, .max_lora_rank = 8});
  EXPECT_TRUE(r.ok()) << r.status();
  return r.ok() ? std::move(*r) : nullptr;
}

LoraInfo Info(const LoraRegistry& r, const std::string& name) {
  for (const LoraInfo& i : r.List()) {
    if (i.name == name) return i;
  }
  ADD_FAILURE() << name << " not listed";
  return {};
}

TEST(LoraRegistry, CreateRefusesBadOptions) {
  struct Case {
    std::string name;
    LoraRegistryOptions o;
  };
  const Case cases[] = {
      {"no slots", {.max_loras = 0}},
      {"rank 0", {.max_lora_rank = 0}},
      {"rank too large", {.max_lora_rank = 1024}},
      {"bf16 storage", {.dtype = DType::kBF16}},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    EXPECT_EQ(LoraRegistry::Create(Base(), c.o).status().code(), StatusCode::kInvalidArgument);
  }
}

TEST(LoraRegistry, LoadListAcquireUnload) {
  TempDir tmp;
  WriteAdapters(tmp.path(), {"a"});
  std::unique_ptr<LoraRegistry> reg = Make(2);
  ASSERT_NE(reg, nullptr);
  ASSERT_TRUE(reg->Load("a", tmp.path() / "a").ok());
  LoraInfo a = Info(*reg, "a");
  EXPECT_EQ(a.parent, "tiny");
  EXPECT_EQ(a.dir, tmp.path() / "a");
  EXPECT_EQ(a.rank, 4);
  EXPECT_FLOAT_EQ(a.scale, 4.0f);  // alpha 16 / r 4
  EXPECT_TRUE(a.resident);
  EXPECT_GT(a.adapter_id, 0);
  EXPECT_GT(a.bytes, 0u);
  EXPECT_EQ(a.pins, 0);

  struct Case {
    std::string name;
    Status got;
    StatusCode code;
    std::string want;
  };
  const Case cases[] = {
      {"duplicate", reg->Load("a", tmp.path() / "a"), StatusCode::kAlreadyExists, "'a' is already loaded"},
      {"base model's name", reg->Load("tiny", tmp.path() / "a"), StatusCode::kInvalidArgument, "base model"},
      {"empty name", reg->Load("", tmp.path() / "a"), StatusCode::kInvalidArgument, "empty"},
      {"missing directory", reg->Load("b", tmp.path() / "nowhere"), StatusCode::kNotFound, "LoRA adapter 'b': "},
      {"unload unknown", reg->Unload("zzz"), StatusCode::kNotFound, "'zzz' is not loaded"},
      {"acquire unknown", reg->Acquire("zzz").status(), StatusCode::kNotFound, "'zzz' is not loaded"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    EXPECT_EQ(c.got.code(), c.code) << c.got;
    EXPECT_NE(c.got.message().find(c.want), std::string::npos) << c.got;
  }
  EXPECT_FALSE(reg->Contains("b"));

  StatusOr<LoraPin> pin = reg->Acquire("a");
  ASSERT_TRUE(pin.ok()) << pin.status();
  EXPECT_EQ(pin->slot(), a.slot);
  EXPECT_EQ(pin->adapter_id(), a.adapter_id);
  StatusOr<LoraPin> pin2 = reg->Acquire("a");
  ASSERT_TRUE(pin2.ok());
  EXPECT_EQ(Info(*reg, "a").pins, 2);
  const Status in_use = reg->Unload("a");
  EXPECT_EQ(in_use.code(), StatusCode::kFailedPrecondition) << in_use;
  EXPECT_NE(in_use.message().find("in use by 2"), std::string::npos) << in_use;
  LoraPin moved = std::move(*pin);
  EXPECT_FALSE(pin->held());
  moved.Reset();
  pin2 = Status(StatusCode::kCancelled, "dropped");  // destroys the second pin
  EXPECT_EQ(Info(*reg, "a").pins, 0);
  EXPECT_TRUE(reg->Unload("a").ok());
  EXPECT_TRUE(reg->List().empty());
  // The name is free again.
  EXPECT_TRUE(reg->Load("a", tmp.path() / "a").ok());
}

TEST(LoraRegistry, EvictsLeastRecentlyUsedUnpinnedAdapters) {
  TempDir tmp;
  WriteAdapters(tmp.path(), {"a", "b", "c", "d"});
  std::unique_ptr<LoraRegistry> reg = Make(2);
  ASSERT_NE(reg, nullptr);
  ASSERT_TRUE(reg->Load("a", tmp.path() / "a").ok());
  ASSERT_TRUE(reg->Load("b", tmp.path() / "b").ok());
  StatusOr<LoraPin> pa = reg->Acquire("a");  // a is pinned and the most recent
  ASSERT_TRUE(pa.ok());
  const int32_t b_slot = Info(*reg, "b").slot;
  const int32_t b_id = Info(*reg, "b").adapter_id;

  ASSERT_TRUE(reg->Load("c", tmp.path() / "c").ok());  // evicts b
  EXPECT_FALSE(Info(*reg, "b").resident);
  EXPECT_EQ(Info(*reg, "c").slot, b_slot);
  EXPECT_TRUE(Info(*reg, "a").resident);

  pa->Reset();
  { StatusOr<LoraPin> pc = reg->Acquire("c"); }  // c now more recent than a
  StatusOr<LoraPin> pb = reg->Acquire("b");      // read back from disk, evicting a
  ASSERT_TRUE(pb.ok()) << pb.status();
  EXPECT_FALSE(Info(*reg, "a").resident);
  EXPECT_TRUE(Info(*reg, "b").resident);
  EXPECT_NE(pb->adapter_id(), b_id) << "a new residency gets a new id";
  StatusOr<LoraPin> pc = reg->Acquire("c");
  ASSERT_TRUE(pc.ok());

  // Every slot pinned: a new adapter is registered but not resident, and cannot be acquired.
  ASSERT_TRUE(reg->Load("d", tmp.path() / "d").ok());
  EXPECT_FALSE(Info(*reg, "d").resident);
  const StatusOr<LoraPin> full = reg->Acquire("d");
  EXPECT_EQ(full.status().code(), StatusCode::kResourceExhausted) << full.status();
  EXPECT_NE(full.status().message().find("all 2 adapter slots are in use"), std::string::npos);
  const int32_t freed = pb->slot();
  pb->Reset();
  StatusOr<LoraPin> pd = reg->Acquire("d");
  ASSERT_TRUE(pd.ok()) << pd.status();
  EXPECT_EQ(pd->slot(), freed);
  EXPECT_EQ(reg->List().size(), 4u);
}

TEST(LoraRegistry, ResolveChecksIdsAndKeepsAdaptersAlive) {
  TempDir tmp;
  WriteAdapters(tmp.path(), {"a", "b"});
  std::unique_ptr<LoraRegistry> reg = Make(2);
  ASSERT_NE(reg, nullptr);
  ASSERT_TRUE(reg->Load("a", tmp.path() / "a").ok());
  ASSERT_TRUE(reg->Load("b", tmp.path() / "b").ok());
  LoraBatch batch;
  EXPECT_TRUE(reg->Resolve(std::vector<int32_t>{kBaseAdapterId, kBaseAdapterId}, batch).ok());
  EXPECT_TRUE(batch.empty());

  const int32_t a_id = Info(*reg, "a").adapter_id;
  struct Case {
    std::string name;
    std::vector<int32_t> ids;
    std::string want;
  };
  const Case cases[] = {
      {"resident but not held", {kBaseAdapterId, a_id}, "token 1 names adapter id " + std::to_string(a_id)},
      {"unknown id", {999}, "adapter id 999"},
      {"negative id", {-1}, "adapter id -1"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    ASSERT_TRUE(reg->Resolve(std::vector<int32_t>{kBaseAdapterId}, batch).ok());
    const Status s = reg->Resolve(c.ids, batch);
    EXPECT_EQ(s.code(), StatusCode::kFailedPrecondition) << s;
    EXPECT_NE(s.message().find(c.want), std::string::npos) << s;
    EXPECT_EQ(batch.num_tokens(), 0);
  }

  StatusOr<LoraPin> pa = reg->Acquire("a");
  StatusOr<LoraPin> pb = reg->Acquire("b");
  ASSERT_TRUE(pa.ok() && pb.ok());
  const std::vector<int32_t> ids = {pb->adapter_id(), kBaseAdapterId, pa->adapter_id(), pb->adapter_id()};
  ASSERT_TRUE(reg->Resolve(ids, batch).ok());
  EXPECT_EQ(batch.num_adapters(), 2);
  ASSERT_EQ(batch.tiles().size(), 2u);
  EXPECT_EQ(batch.tiles()[0].count, 2);  // b's tokens 0 and 3

  // The requests finish and the adapters are unloaded while the step still runs: the batch keeps
  // the weights alive.
  pa->Reset();
  pb->Reset();
  ASSERT_TRUE(reg->Unload("a").ok());
  ASSERT_TRUE(reg->Unload("b").ok());
  const int64_t H = Base().hidden_size;
  std::vector<float> x(4 * static_cast<size_t>(H), 0.5f), y(4 * static_cast<size_t>(H), 0.0f);
  kernels::ThreadPool pool(2);
  ApplyLora(pool, batch, 1, LoraModule::kQ, x.data(), H, y.data(), H, 0);
  EXPECT_NE(y[0], 0.0f);
  EXPECT_EQ(y[static_cast<size_t>(H)], 0.0f);  // the base-only token
}

// Server threads load, unload and acquire while the engine thread resolves and applies.
TEST(LoraRegistry, ConcurrentUse) {
  TempDir tmp;
  WriteAdapters(tmp.path(), {"a", "x0", "x1", "x2"});
  std::unique_ptr<LoraRegistry> reg = Make(2);
  ASSERT_NE(reg, nullptr);
  ASSERT_TRUE(reg->Load("a", tmp.path() / "a").ok());
  std::atomic<bool> stop{false};
  std::atomic<int> unexpected{0};
  auto expected = [](const Status& s) {
    return s.ok() || s.code() == StatusCode::kAlreadyExists || s.code() == StatusCode::kNotFound ||
           s.code() == StatusCode::kFailedPrecondition || s.code() == StatusCode::kResourceExhausted ||
           s.code() == StatusCode::kAborted;
  };
  std::vector<std::thread> servers;
  for (int t = 0; t < 2; ++t) {
    servers.emplace_back([&, t] {
      for (int i = 0; !stop.load() && i < 400; ++i) {
        const std::string n = "x" + std::to_string((i + t) % 3);
        Status s;
        switch (i % 3) {
          case 0:
            s = reg->Load(n, tmp.path() / n);
            break;
          case 1: {
            StatusOr<LoraPin> p = reg->Acquire(n);
            s = p.status();
            break;
          }
          default:
            s = reg->Unload(n);
        }
        if (!expected(s)) unexpected.fetch_add(1);
        (void)reg->List();
      }
    });
  }
  kernels::ThreadPool pool(1);
  const int64_t H = Base().hidden_size;
  std::vector<float> x(2 * static_cast<size_t>(H), 0.25f), y(2 * static_cast<size_t>(H));
  LoraBatch batch;
  int applied = 0;
  for (int i = 0; i < 300; ++i) {
    StatusOr<LoraPin> p = reg->Acquire("a");
    if (!p.ok()) {
      EXPECT_EQ(p.status().code(), StatusCode::kResourceExhausted) << p.status();
      continue;
    }
    const std::vector<int32_t> ids = {p->adapter_id(), kBaseAdapterId};
    ASSERT_TRUE(reg->Resolve(ids, batch).ok());
    std::fill(y.begin(), y.end(), 0.0f);
    ApplyLora(pool, batch, 0, LoraModule::kQ, x.data(), H, y.data(), H, 0);
    for (float v : y) ASSERT_TRUE(std::isfinite(v));
    ++applied;
  }
  stop = true;
  for (std::thread& t : servers) t.join();
  EXPECT_EQ(unexpected.load(), 0);
  EXPECT_GT(applied, 0);
}

}  // namespace
}  // namespace aicloud::engine
