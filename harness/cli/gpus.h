// --gpus LIST (issue 22): a one-GPU campaign's --jobs processes spread over a host's GPUs, each
// pinned to one by CUDA_VISIBLE_DEVICES in its environment (workers.cpp), so that every CUDA
// context of that process and of the framework worker it starts lands on its GPU. Pure functions
// (no device, no CLI11), so tests/cli/gpus_test.cpp checks them without a GPU.
#pragma once

#include <string>
#include <vector>

namespace recap::cli {

// What --gpus TEXT names: "all" or comma-separated ordinals ("0,1,2,3"). `count` is the number of
// devices when it can be known (-1 when not, with `why_unknown` saying why). Returns "" and fills
// *out, or one line naming the problem (empty list, not an integer, negative, repeated, >= count,
// "all" without a count).
std::string parse_gpus(const std::string& text, int count, const std::string& why_unknown, std::vector<int>* out);

// The GPU of job j: round-robin over the list (job j -> gpus[j % n]).
int gpu_of_job(int job, const std::vector<int>& gpus);

// The CUDA_VISIBLE_DEVICES value that shows a process exactly ordinal `ordinal` of what this
// process sees: the ordinal itself, or, when this process has CUDA_VISIBLE_DEVICES set
// (`parent`, null when unset), its ordinal-th entry (CUDA numbers the visible devices from 0).
std::string visible_value(int ordinal, const char* parent);

// The devices a process with CUDA_VISIBLE_DEVICES = `parent` sees among `physical` (-1: unknown):
// the number of its entries when set ("" hides every device), else `physical`.
int visible_count(int physical, const char* parent);

// The GPUs `nvidia-smi -L` lists ("GPU 0: NVIDIA H200 (UUID: GPU-...)"), one a line.
int count_nvidia_smi_lines(const std::string& output);

}  // namespace recap::cli
