// A deliberately naive row softmax for gpt_train's --attention naive: one block of 256 threads walks
// every row. On an H100/H200 it keeps 1 of 132 SMs busy — what steptrace's SM efficiency shows.
#include <cuda_runtime.h>

__global__ void naive_softmax_rows_kernel(const float* x, float* y, long rows, int cols) {
  for (long r = threadIdx.x; r < rows; r += blockDim.x) {
    const float* in = x + r * cols;
    float* out = y + r * cols;
    float m = -INFINITY;
    for (int c = 0; c < cols; ++c) m = fmaxf(m, in[c]);
    float sum = 0.f;
    for (int c = 0; c < cols; ++c) sum += __expf(in[c] - m);
    for (int c = 0; c < cols; ++c) out[c] = __expf(in[c] - m) / sum;
  }
}

void naive_softmax_rows(const float* x, float* y, long rows, int cols, cudaStream_t stream) {
  naive_softmax_rows_kernel<<<1, 256, 0, stream>>>(x, y, rows, cols);
}
