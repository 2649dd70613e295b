/* rlk_abi.h: the plain-C tensor view passed from Python (ctypes) to a built hgemm artifact.
 *
 * Kept C (not C++) so that ctypes can mirror it field by field (rl_kernels/evaluation/artifact.py)
 * and so that no torch or C++ ABI crosses the boundary: the artifact only sees this struct.
 */
#ifndef RLK_ABI_H
#define RLK_ABI_H

#include <stdint.h>

#define RLK_MAX_DIM 8

/* Bumped whenever rlk_hgemm's signature changes; artifacts export it as rlk_abi_version(), and a
 * loader refuses an artifact of another version (its arguments would be read at the wrong places). */
#define RLK_ABI_VERSION 2

/* dtype uses c10::ScalarType numbering (Byte=0 Char=1 Short=2 Int=3 Long=4 Half=5 Float=6
 * Double=7 Bool=11 BFloat16=15); -1 means a dtype the shim does not know. */
typedef struct rlk_tensor {
  void* data;
  int64_t sizes[RLK_MAX_DIM];
  int64_t strides[RLK_MAX_DIM]; /* in elements, like torch */
  int32_t dim;
  int32_t dtype;
  int32_t device_type; /* 0 cpu, 1 cuda */
  int32_t device_index;
} rlk_tensor;

#ifdef __cplusplus
extern "C" {
#endif
/* Exported by every hgemm artifact: runs the candidate's entry in the order of `stream` (the
 * caller's cudaStream_t; NULL is the default stream; a cpu artifact ignores it, see rlk_stream.h),
 * returns 0 on success, otherwise non-zero with a NUL-terminated message in err (at most errlen
 * bytes). */
int rlk_hgemm(const rlk_tensor* a, const rlk_tensor* b, const rlk_tensor* b_col_major,
              const rlk_tensor* c, void* stream, char* err, int errlen);
int rlk_abi_version(void);
#ifdef __cplusplus
}
#endif

#endif /* RLK_ABI_H */
