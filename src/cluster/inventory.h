// The inventory loader: turns the YAML file an operator writes to describe the hardware (racks,
// nodes, their GPUs and the NVLink / NUMA / PCIe topology around them) into a Cluster.
//
// The schema (apiVersion aicloud/v1, kind Inventory) is documented in docs/inventory.md, with a
// commented example in examples/inventory.yaml. Decoding is strict, like kubectl's: an unknown
// or repeated field is an error rather than something silently ignored, because a misspelt
// `nvlnk:` that quietly falls back to a default would schedule jobs onto a topology that does
// not exist. Every error names the file, the 1-based line, and the field:
//
//   StatusOr<Cluster> c = LoadInventoryFile("examples/inventory.yaml");
//   if (!c.ok()) {
//     // INVALID_ARGUMENT: inventory.yaml:14: nodes[2].gpus.count: must be between 1 and 64, got 0
//     std::cerr << c.status().ToString() << "\n";
//     return 1;
//   }
//   Schedule(*c);
//
// Thread-safe: the functions keep no state between calls.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "cluster/cluster.h"
#include "core/status.h"

namespace aicloud::cluster {

// The most GPUs one node may declare; well above any shipping chassis, low enough that a typo
// such as `count: 800` is caught.
inline constexpr int kMaxGpusPerNode = 64;
// The most nodes one `replicas:` entry may expand to.
inline constexpr int kMaxReplicas = 100000;

// Reads and parses the inventory at `path`. NotFound when the file cannot be opened;
// InvalidArgument, prefixed "path:line: field: ", when its contents are wrong.
StatusOr<Cluster> LoadInventoryFile(const std::string& path);

// Parses inventory YAML held in memory. `name_for_errors` stands in for the file name in
// messages ("<stdin>", a test's name, ...).
StatusOr<Cluster> ParseInventory(std::string_view yaml, const std::string& name_for_errors);

// The quantity parsers the loader uses, exposed for other operator-facing inputs (job specs)
// so both accept the same spellings. Errors carry no location prefix; callers add it.
//
// CPU: whole or fractional cores ("96", "0.5") or millicores ("96000m"). Must be positive.
StatusOr<int64_t> ParseCpuMilli(std::string_view text);
// Memory: a number with a binary suffix Ki, Mi, Gi, Ti or Pi ("1024Gi", "1.5Ti"), rounded down
// to whole MiB; must come to at least 1Mi. A bare number or a decimal suffix (G, GB) is rejected
// rather than guessed at, since "1024" could mean bytes (Kubernetes) or GiB (most people).
StatusOr<int64_t> ParseMemoryMib(std::string_view text);

}  // namespace aicloud::cluster
