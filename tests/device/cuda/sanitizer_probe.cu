// The planted fault of scripts/gpu-sanitizer.sh (issue 21): `recap_sanitizer_probe oob` launches a
// kernel that writes one int past the end of its cudaMalloc'd buffer, which compute-sanitizer's
// memcheck must report; `recap_sanitizer_probe clean` launches the same kernel within bounds, which
// it must not (the control that shows the script reads the report, not the exit code alone). Not
// a ctest: without the sanitizer an out-of-bounds write often goes unnoticed, so nothing here can
// fail a plain run. Exit 0 when the kernel ran, 2 on bad usage or no usable GPU.
#include <cuda_runtime_api.h>

#include <cstdio>
#include <cstring>

namespace {

__global__ void fill(int* out, int n, int past) {
  const int i = static_cast<int>(blockIdx.x * blockDim.x + threadIdx.x);
  if (i < n + past) out[i] = i;  // past = 1: thread n writes out[n], one int beyond the buffer
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2 || (std::strcmp(argv[1], "oob") != 0 && std::strcmp(argv[1], "clean") != 0)) {
    std::fprintf(stderr, "usage: recap_sanitizer_probe oob|clean\n");
    return 2;
  }
  const int past = std::strcmp(argv[1], "oob") == 0 ? 1 : 0;
  const int n = 1000;  // not a multiple of the 256-byte allocation granule: out[n] is inside the
                       // allocation's padding, where only a sanitizer sees the write
  int* buf = nullptr;
  if (cudaMalloc(&buf, n * sizeof(int)) != cudaSuccess) {
    std::fprintf(stderr, "recap_sanitizer_probe: no usable GPU (cudaMalloc failed)\n");
    return 2;
  }
  fill<<<(n + past + 255) / 256, 256>>>(buf, n, past);
  const cudaError_t launched = cudaGetLastError();
  const cudaError_t done = cudaDeviceSynchronize();
  cudaFree(buf);
  std::printf("recap_sanitizer_probe %s: launch %s, sync %s\n", argv[1], cudaGetErrorName(launched), cudaGetErrorName(done));
  return 0;
}
