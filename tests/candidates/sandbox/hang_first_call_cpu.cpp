// Hangs at its first call (cpu): a tiled product whose tile step is computed from the shape and
// comes out 0 for any matrix under 256 rows, so the row-tile loop never advances.  The index is
// volatile so the compiler cannot assume the loop ends (an endless loop without side effects is
// undefined behaviour in C++).  The watchdog must report it `hung` within the floor plus one
// call's allowance, long before the job's wall limit.
#include <torch/extension.h>

#include <vector>

void hgemm_tiles(torch::Tensor a, torch::Tensor b, torch::Tensor b_col_major, torch::Tensor c) {
  const long m = a.size(0), k = a.size(1), n = b.size(1);
  const _Float16* pa = reinterpret_cast<const _Float16*>(a.data_ptr());
  const _Float16* pb = reinterpret_cast<const _Float16*>(b.data_ptr());
  _Float16* pc = reinterpret_cast<_Float16*>(c.data_ptr());
  const long step = m / 256;   // the bug: meant (m + 255) / 256 tiles, wrote a tile count as the step
  std::vector<float> acc(n);
  for (volatile long i0 = 0; i0 < m; i0 = i0 + step) {
    const long i = i0;
    for (long j = 0; j < n; ++j) acc[j] = 0.0f;
    for (long p = 0; p < k; ++p) {
      const float a_ip = static_cast<float>(pa[i * k + p]);
      for (long j = 0; j < n; ++j) acc[j] += a_ip * static_cast<float>(pb[p * n + j]);
    }
    for (long j = 0; j < n; ++j) pc[i * n + j] = static_cast<_Float16>(acc[j]);
  }
}
