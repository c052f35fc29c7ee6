// Internal: functions that CUDA (or HIP) device code and the host share, marked for both.
#pragma once

#if defined(__CUDACC__) || defined(__HIPCC__)
#define CHORUS_HOST_DEVICE __host__ __device__
#else
#define CHORUS_HOST_DEVICE
#endif
