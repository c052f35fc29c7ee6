// chorus — one GPU source for CUDA and HIP. The .cu files in this folder are written against the
// CUDA runtime API; built for HIP (CHORUS_GPU_HIP defined by kernels/CMakeLists.txt) the names
// they use are mapped to their HIP twins here. Add a line when a source starts using a new name.
// Error codes keep their values across the two (cudaErrorMemoryAllocation == hipErrorOutOfMemory
// == 2, insufficient driver 35, no device 100), which the tests rely on.
#pragma once

#if defined(CHORUS_GPU_HIP)

#include <hip/hip_fp16.h>
#include <hip/hip_runtime.h>

#define CHORUS_GPU_RUNTIME_NAME "HIP"

// errors
#define cudaError_t hipError_t
#define cudaSuccess hipSuccess
#define cudaErrorInvalidValue hipErrorInvalidValue
#define cudaErrorInvalidDevice hipErrorInvalidDevice
#define cudaErrorInvalidResourceHandle hipErrorInvalidHandle
#define cudaErrorInsufficientDriver hipErrorInsufficientDriver
#define cudaErrorNoDevice hipErrorNoDevice
#define cudaErrorNotReady hipErrorNotReady
#define cudaErrorNotSupported hipErrorNotSupported
#define cudaErrorStreamCaptureImplicit hipErrorStreamCaptureImplicit
#define cudaErrorPeerAccessAlreadyEnabled hipErrorPeerAccessAlreadyEnabled
#define cudaGetErrorName hipGetErrorName
#define cudaGetErrorString hipGetErrorString
#define cudaGetLastError hipGetLastError
// devices
#define cudaDeviceProp hipDeviceProp_t
#define cudaDeviceCanAccessPeer hipDeviceCanAccessPeer
#define cudaDeviceEnablePeerAccess hipDeviceEnablePeerAccess
#define cudaDeviceGetAttribute hipDeviceGetAttribute
#define cudaDeviceGetPCIBusId hipDeviceGetPCIBusId
#define cudaDeviceSynchronize hipDeviceSynchronize
#define cudaDriverGetVersion hipDriverGetVersion
#define cudaGetDevice hipGetDevice
#define cudaGetDeviceCount hipGetDeviceCount
#define cudaGetDeviceProperties hipGetDeviceProperties
#define cudaRuntimeGetVersion hipRuntimeGetVersion
#define cudaSetDevice hipSetDevice
// memory
#define cudaFree hipFree
#define cudaFreeHost hipHostFree
#define cudaHostAlloc hipHostMalloc
#define cudaHostAllocMapped hipHostMallocMapped
#define cudaHostAllocPortable hipHostMallocPortable
#define cudaHostGetDevicePointer hipHostGetDevicePointer
#define cudaMalloc hipMalloc
#define cudaMemcpyAsync hipMemcpyAsync
#define cudaMemcpyDefault hipMemcpyDefault
#define cudaMemsetAsync hipMemsetAsync
#define cudaPointerAttributes hipPointerAttribute_t
#define cudaPointerGetAttributes hipPointerGetAttributes
#define cudaMemoryTypeDevice hipMemoryTypeDevice
#define cudaMemoryTypeHost hipMemoryTypeHost
// streams and events
#define cudaStream_t hipStream_t
#define cudaStreamCreateWithFlags hipStreamCreateWithFlags
#define cudaStreamDefault hipStreamDefault
#define cudaGraph_t hipGraph_t
#define cudaGraphDestroy hipGraphDestroy
#define cudaStreamBeginCapture hipStreamBeginCapture
#define cudaStreamCaptureModeThreadLocal hipStreamCaptureModeThreadLocal
#define cudaStreamCaptureStatus hipStreamCaptureStatus
#define cudaStreamCaptureStatusNone hipStreamCaptureStatusNone
#define cudaStreamDestroy hipStreamDestroy
#define cudaStreamEndCapture hipStreamEndCapture
#define cudaStreamIsCapturing hipStreamIsCapturing
#define cudaStreamNonBlocking hipStreamNonBlocking
#define cudaStreamQuery hipStreamQuery
#define cudaStreamSynchronize hipStreamSynchronize
#define cudaStreamWaitEvent hipStreamWaitEvent
#define cudaEvent_t hipEvent_t
#define cudaEventCreateWithFlags hipEventCreateWithFlags
#define cudaEventDefault hipEventDefault
#define cudaEventDestroy hipEventDestroy
#define cudaEventDisableTiming hipEventDisableTiming
#define cudaEventElapsedTime hipEventElapsedTime
#define cudaEventInterprocess hipEventInterprocess
#define cudaEventQuery hipEventQuery
#define cudaEventRecord hipEventRecord
#define cudaEventSynchronize hipEventSynchronize
// inter-process handles
#define cudaIpcCloseMemHandle hipIpcCloseMemHandle
#define cudaIpcEventHandle_t hipIpcEventHandle_t
#define cudaIpcGetEventHandle hipIpcGetEventHandle
#define cudaIpcGetMemHandle hipIpcGetMemHandle
#define cudaIpcMemHandle_t hipIpcMemHandle_t
#define cudaIpcMemLazyEnablePeerAccess hipIpcMemLazyEnablePeerAccess
#define cudaIpcOpenEventHandle hipIpcOpenEventHandle
#define cudaIpcOpenMemHandle hipIpcOpenMemHandle

// hipPointerAttribute_t names the memory type `memoryType` before ROCm 6 and `type` from 6 on.
// Managed memory is hipMemoryTypeManaged from ROCm 6 on; HIP 5 has only the (unused) "unified".
#if HIP_VERSION_MAJOR >= 6
#define CHORUS_GPU_POINTER_TYPE(attr) ((attr).type)
#define cudaMemoryTypeManaged hipMemoryTypeManaged
#else
#define CHORUS_GPU_POINTER_TYPE(attr) ((attr).memoryType)
#define cudaMemoryTypeManaged hipMemoryTypeUnified
#endif

#else  // CUDA

#include <cuda_fp16.h>
#include <cuda_runtime.h>

#define CHORUS_GPU_RUNTIME_NAME "CUDA"
#define CHORUS_GPU_POINTER_TYPE(attr) ((attr).type)

#endif
