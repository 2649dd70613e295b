/* rlk_stream.h: a CUDA hgemm artifact's work runs in its caller's stream order.
 *
 * Why: kernels written CUDA-L2's way launch on "the default stream" (`<<<grid, block>>>` or
 * CUTLASS's `gemm.run()`), while a caller may be on any stream, including one that is being
 * captured into a CUDA graph, where the legacy default stream is forbidden.  Artifacts are
 * compiled with `--default-stream per-thread`, so "the default stream" is this thread's per-thread
 * stream; StreamGuard makes it wait for the caller's stream before the candidate runs and the
 * caller's stream wait for it afterwards (an event each way: under capture this forks the
 * per-thread stream into the capture and joins it back).  When the caller is the legacy default
 * stream (torch's default; the evaluator's) no event is needed: the legacy stream already
 * synchronises with the per-thread one.  Candidates that ask for the current stream
 * (at::cuda::getCurrentCUDAStream() in the shim) get the caller's stream itself.
 */
#ifndef RLK_STREAM_H
#define RLK_STREAM_H

#include <cuda_runtime.h>

#include <stdexcept>
#include <string>

namespace rlk {

/* The caller's stream while an rlk_hgemm call runs (nullptr: the default stream). */
inline thread_local cudaStream_t current_stream = nullptr;

constexpr int kMaxDevices = 64;

class StreamGuard {
 public:
  explicit StreamGuard(cudaStream_t caller) : caller_(caller), previous_(current_stream) {
    current_stream = caller;
    forked_ = caller != nullptr && caller != cudaStreamLegacy && caller != cudaStreamPerThread;
    if (forked_) {
      check(cudaEventRecord(event(0), caller_), "cudaEventRecord on the caller's stream");
      check(cudaStreamWaitEvent(cudaStreamPerThread, event(0), 0), "cudaStreamWaitEvent (fork)");
    }
  }
  StreamGuard(const StreamGuard&) = delete;
  StreamGuard& operator=(const StreamGuard&) = delete;

  /* The caller's stream waits for everything the candidate queued; throws on a CUDA error. */
  void join() { rejoin(true); }

  /* After a candidate threw: join anyway (the caller's stream must not run ahead of queued work). */
  ~StreamGuard() { rejoin(false); }

 private:
  /* The one join (join() and the destructor): checked, a CUDA error throws; unchecked (a destructor
   * must not throw), it is dropped after the join was tried. */
  void rejoin(bool checked) {
    current_stream = previous_;
    if (!forked_) return;
    forked_ = false;
    try {
      check(cudaEventRecord(event(1), cudaStreamPerThread), "cudaEventRecord on the per-thread stream");
      check(cudaStreamWaitEvent(caller_, event(1), 0), "cudaStreamWaitEvent (join)");
    } catch (...) {
      if (checked) throw;
    }
  }

  static void check(cudaError_t err, const char* what) {
    if (err != cudaSuccess) throw std::runtime_error(std::string(what) + ": " + cudaGetErrorString(err));
  }
  /* Two events per device and thread, made on first use and kept (no allocation per call). */
  static cudaEvent_t event(int which) {
    static thread_local cudaEvent_t events[kMaxDevices][2] = {};
    int device = 0;
    check(cudaGetDevice(&device), "cudaGetDevice");
    if (device < 0 || device >= kMaxDevices) throw std::runtime_error("device index out of range");
    cudaEvent_t& e = events[device][which];
    if (e == nullptr) check(cudaEventCreateWithFlags(&e, cudaEventDisableTiming), "cudaEventCreateWithFlags");
    return e;
  }

  cudaStream_t caller_;
  cudaStream_t previous_;
  bool forked_ = false;
};

}  // namespace rlk

#endif /* RLK_STREAM_H */
