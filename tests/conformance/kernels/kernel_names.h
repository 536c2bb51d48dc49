// Mangled names of the conformance kernels, as the driver sees them (checked with nvcc 13 for
// sm_80: readelf -s on the cubin). A simgpu module built by g++ must export the same names.
#pragma once

namespace phos::conformance {

// vec_add(const float*, const float*, float*, int)
inline constexpr const char* kVecAdd = "_Z7vec_addPKfS0_Pfi";
// scale_add(float*, float, float, int)
inline constexpr const char* kScaleAdd = "_Z9scale_addPfffi";
// record_threads(unsigned int*, unsigned int*)
inline constexpr const char* kRecordThreads = "_Z14record_threadsPjS_";
// mixed_params(char, double, const int*, short, float, ParamPair, long long, long long*)
inline constexpr const char* kMixedParams = "_Z12mixed_paramscdPKisf9ParamPairxPx";
// apply_coefficients(const float*, float*, int)
inline constexpr const char* kApplyCoefficients = "_Z18apply_coefficientsPKfPfi";
// Its module's variables: __constant__ float coefficients[16], __device__ unsigned int applied
// (namespace scope: their names are not mangled).
inline constexpr const char* kCoefficients = "coefficients";
inline constexpr const char* kApplied = "applied";

}  // namespace phos::conformance
