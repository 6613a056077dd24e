// aicloud_gpu_wipe: the GPU memory wipe helper on its own (the agent tests run it; on nodes the
// aicloud binary's `gpu-wipe` command is the same code). See gpu_wipe.h.
#include "agent/gpu_wipe.h"

int main(int argc, char** argv) { return aicloud::agent::GpuWipeMain(argc, argv); }
