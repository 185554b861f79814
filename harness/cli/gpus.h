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


// --jobs auto (issue 21: workers per GPU chosen from the CPU cores and GPU memory): one job per CPU
// core this process may run on, and, when the jobs use GPUs, no more than the GPUs' free memory
// holds at `per_job_mib` a job (each GPU's share summed, as --gpus spreads jobs round-robin; at
// least one a GPU). `free_mib` empty: GPU memory not known or not used, cores alone decide.
// Returns at least 1 and at most 256 (--jobs's range); *why gets one line saying how it was chosen.
int auto_jobs(int cores, const std::vector<long long>& free_mib, long long per_job_mib, std::string* why);

// The free MiB of each GPU in `nvidia-smi --query-gpu=memory.free --format=csv,noheader,nounits`'s
// output (one integer a line, in nvidia-smi's order); an unreadable line gives an empty result.
std::vector<long long> parse_free_mib(const std::string& output);

// The free MiB of the GPUs `ordinals` (as this process numbers them: CUDA_VISIBLE_DEVICES =
// `parent`, null when unset) among nvidia-smi's physical list `physical_free`. Returns "" or why
// it cannot tell (an ordinal past the list, a CUDA_VISIBLE_DEVICES entry that is not an index).
std::string free_mib_of(const std::vector<int>& ordinals, const char* parent, const std::vector<long long>& physical_free,
                        std::vector<long long>* out);

}  // namespace recap::cli
