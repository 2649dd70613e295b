// rl_kernels shim: see rlk_torch_shim.h for the supported subset of the torch C++ API.
#pragma once
#include "rlk_torch_shim.h"
