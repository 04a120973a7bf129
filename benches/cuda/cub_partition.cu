// Reference figures for `ridgeline bench partition` (BENCHMARKS.md; docs/benchmarks/history/session-31.md), not part
// of the build: compile on a machine with the CUDA toolkit,
//   nvcc -O3 -arch=sm_90 -o cub_partition benches/cuda/cub_partition.cu && ./cub_partition 24 28
// CUDA anchors for `bench partition` on the same machine: one-pass (8-bit) stable
// radix partition of u32 keys + u32 payload by cub::DeviceRadixSort::SortPairs
// with bits [0, 8) (a 256-way stable partition), keys only, 4-bit (16-way) and
// 1-bit (2-way) passes, a full 32-bit SortKeys, and cudaMemcpy device to device.
#include <cub/cub.cuh>
#include <cstdio>
#include <vector>
#include <algorithm>
#define CK(x) do { cudaError_t e = (x); if (e != cudaSuccess) { printf("CUDA error %s at %d\n", cudaGetErrorString(e), __LINE__); return 1; } } while (0)
__global__ void fill(unsigned* k, unsigned* v, size_t n) {
  size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
  if (i < n) { unsigned long long s = (i + 1) * 0x9E3779B97F4A7C15ull; s ^= s >> 29; s *= 0xBF58476D1CE4E5B9ull; k[i] = (unsigned)(s >> 32); v[i] = (unsigned)i; }
}
template <typename F> float timeit(F f, int reps) {
  cudaEvent_t a, b; cudaEventCreate(&a); cudaEventCreate(&b);
  f(); cudaDeviceSynchronize();
  std::vector<float> t;
  for (int r = 0; r < reps; r++) { cudaEventRecord(a); f(); cudaEventRecord(b); cudaEventSynchronize(b); float ms; cudaEventElapsedTime(&ms, a, b); t.push_back(ms); }
  std::sort(t.begin(), t.end()); return t[t.size() / 2];
}
int main(int argc, char** argv) {
  int lo = argc > 1 ? atoi(argv[1]) : 24, hi = argc > 2 ? atoi(argv[2]) : 28, reps = 9;
  cudaDeviceProp p; cudaGetDeviceProperties(&p, 0);
  printf("device %s, CUDA events, median of %d\n", p.name, reps);
  printf("| n | memcpy key+payload ms (TB/s) | SortPairs bits 0-1 (2-way) ms | bits 0-4 (16-way) ms | bits 0-8 (256-way) ms | 256-way keys only ms | SortKeys 32 bits ms |\n| --- | --- | --- | --- | --- | --- | --- |\n");
  for (int k = lo; k <= hi; k++) {
    size_t n = 1ull << k;
    unsigned *k0, *v0, *k1, *v1;
    CK(cudaMalloc(&k0, n * 4)); CK(cudaMalloc(&v0, n * 4)); CK(cudaMalloc(&k1, n * 4)); CK(cudaMalloc(&v1, n * 4));
    fill<<<(n + 255) / 256, 256>>>(k0, v0, n); CK(cudaDeviceSynchronize());
    size_t tb = 0, t2 = 0; void* tmp = nullptr;
    cub::DeviceRadixSort::SortPairs(nullptr, tb, k0, k1, v0, v1, (int64_t)n, 0, 32);
    cub::DeviceRadixSort::SortKeys(nullptr, t2, k0, k1, (int64_t)n, 0, 32);
    tb = std::max(tb, t2); CK(cudaMalloc(&tmp, tb));
    float mc = timeit([&] { cudaMemcpyAsync(k1, k0, n * 4, cudaMemcpyDeviceToDevice); cudaMemcpyAsync(v1, v0, n * 4, cudaMemcpyDeviceToDevice); }, reps);
    auto pairs = [&](int bits) { return timeit([&] { size_t t = tb; cub::DeviceRadixSort::SortPairs(tmp, t, k0, k1, v0, v1, (int64_t)n, 0, bits); }, reps); };
    float p1 = pairs(1), p4 = pairs(4), p8 = pairs(8);
    float k8 = timeit([&] { size_t t = tb; cub::DeviceRadixSort::SortKeys(tmp, t, k0, k1, (int64_t)n, 0, 8); }, reps);
    float k32 = timeit([&] { size_t t = tb; cub::DeviceRadixSort::SortKeys(tmp, t, k0, k1, (int64_t)n, 0, 32); }, reps);
    // check the 256-way pass: stable by bits 0-8
    { size_t t = tb; cub::DeviceRadixSort::SortPairs(tmp, t, k0, k1, v0, v1, (int64_t)n, 0, 8); cudaDeviceSynchronize();
      std::vector<unsigned> hk(n), hv(n); cudaMemcpy(hk.data(), k1, n * 4, cudaMemcpyDeviceToHost); cudaMemcpy(hv.data(), v1, n * 4, cudaMemcpyDeviceToHost);
      size_t bad = 0; for (size_t i = 1; i < n; i++) { unsigned a = hk[i - 1] & 255, b = hk[i] & 255; if (a > b || (a == b && hv[i - 1] >= hv[i])) bad++; }
      if (bad) printf("256-way check: %zu bad pairs\n", bad); }
    printf("| 2^%d | %.3f (%.2f) | %.3f | %.3f | %.3f | %.3f | %.3f |\n", k, mc, 4.0 * n * 4 / (mc * 1e-3) / 1e12, p1, p4, p8, k8, k32);
    cudaFree(k0); cudaFree(v0); cudaFree(k1); cudaFree(v1); cudaFree(tmp);
  }
  return 0;
}
