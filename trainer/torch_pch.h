// Precompiled header for the few translation units that use LibTorch (see trainer/CMakeLists.txt).
#pragma once
#include <torch/torch.h>
