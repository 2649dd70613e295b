// rl_kernels shim: C10_CUDA_CHECK and C10_CUDA_KERNEL_LAUNCH_CHECK (see c10/cuda/CUDAStream.h).
#pragma once
#include "c10/cuda/CUDAStream.h"
