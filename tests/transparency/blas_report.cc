// A cuBLAS program as its users write one (the toolkit's headers, NVIDIA's libcublas and libcudart,
// nothing of phos): the helper copies, handle settings, Levels 1, 2 and 3 in S and D, GEMMs of every
// type, strided and pointer-array batched GEMMs, in host and device pointer mode. Every result is
// checked against the program's own loops; inputs are quarters, so that products and short sums
// are exact and most checks compare exactly. It exits 0 only when every check held.
// transparency_test runs it under `phos-fn run`.
#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cmath>
#include <complex>
#include <cstdio>
#include <cstring>
#include <vector>

namespace {

int g_checks = 0;
int g_failures = 0;

#define CHECK(cond)                                                \
  do {                                                             \
    ++g_checks;                                                    \
    if (!(cond)) {                                                 \
      std::printf("CHECK FAILED: line %d: %s\n", __LINE__, #cond); \
      ++g_failures;                                                \
    }                                                              \
  } while (0)
#define CUDA_OK(call) CHECK((call) == cudaSuccess)
#define BLAS_OK(call) CHECK((call) == CUBLAS_STATUS_SUCCESS)

template <typename T>
std::vector<T> Quarters(size_t n, int seed) {
  std::vector<T> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = static_cast<T>(static_cast<int>((i * 7 + seed * 3) % 17) - 8) / T(4);
  return v;
}

// Device memory the program frees at the end.
std::vector<void*> g_allocations;
template <typename T>
T* ToDevice(const std::vector<T>& host) {
  void* p = nullptr;
  CUDA_OK(cudaMalloc(&p, host.size() * sizeof(T) + 16));
  CUDA_OK(cudaMemcpy(p, host.data(), host.size() * sizeof(T), cudaMemcpyHostToDevice));
  g_allocations.push_back(p);
  return static_cast<T*>(p);
}
template <typename T>
std::vector<T> ToHost(const T* device, size_t n) {
  std::vector<T> out(n);
  CUDA_OK(cudaMemcpy(out.data(), device, n * sizeof(T), cudaMemcpyDeviceToHost));
  return out;
}

// C = alpha op(A) op(B) + beta C, column-major, op C conjugating complex data.
template <typename T, typename S>
std::vector<T> Gemm(bool ta, bool tb, bool conj_a, int m, int n, int k, S alpha, const std::vector<T>& a,
                    int lda, const std::vector<T>& b, int ldb, S beta, std::vector<T> c, int ldc) {
  for (int j = 0; j < n; ++j) {
    for (int i = 0; i < m; ++i) {
      T sum{};
      for (int p = 0; p < k; ++p) {
        T av = ta ? a[static_cast<size_t>(i) * lda + p] : a[static_cast<size_t>(p) * lda + i];
        if constexpr (!std::is_arithmetic<T>::value) {
          if (conj_a) av = std::conj(av);
        }
        sum += av * (tb ? b[static_cast<size_t>(p) * ldb + j] : b[static_cast<size_t>(j) * ldb + p]);
      }
      c[static_cast<size_t>(j) * ldc + i] = alpha * sum + beta * c[static_cast<size_t>(j) * ldc + i];
    }
  }
  return c;
}

void Helpers(cublasHandle_t h) {
  int version = 0, major = 0;
  BLAS_OK(cublasGetVersion(h, &version));
  BLAS_OK(cublasGetProperty(MAJOR_VERSION, &major));
  CHECK(version == CUBLAS_VERSION && major == CUBLAS_VER_MAJOR);
  CHECK(cublasGetCudartVersion() >= 13000);
  CHECK(std::strcmp(cublasGetStatusName(CUBLAS_STATUS_INVALID_VALUE), "CUBLAS_STATUS_INVALID_VALUE") == 0);
  CHECK(std::strlen(cublasGetStatusString(CUBLAS_STATUS_NOT_SUPPORTED)) > 0);
  cublasMath_t math = CUBLAS_DEFAULT_MATH;
  BLAS_OK(cublasSetMathMode(h, CUBLAS_TF32_TENSOR_OP_MATH));
  BLAS_OK(cublasGetMathMode(h, &math));
  CHECK(math == CUBLAS_TF32_TENSOR_OP_MATH);
  BLAS_OK(cublasSetMathMode(h, CUBLAS_DEFAULT_MATH));
  cublasAtomicsMode_t atomics = CUBLAS_ATOMICS_ALLOWED;
  BLAS_OK(cublasGetAtomicsMode(h, &atomics));
  CHECK(atomics == CUBLAS_ATOMICS_NOT_ALLOWED);
  void* workspace = nullptr;
  CUDA_OK(cudaMalloc(&workspace, 1 << 20));
  BLAS_OK(cublasSetWorkspace(h, workspace, 1 << 20));
  g_allocations.push_back(workspace);
  // A vector every third element of a host array into every second of a device one, and back.
  const int n = 20;
  std::vector<float> x = Quarters<float>(n * 3, 1), back(n * 4, -9.0f);
  float* dy = ToDevice(std::vector<float>(n * 2, 0.0f));
  BLAS_OK(cublasSetVector(n, sizeof(float), x.data(), 3, dy, 2));
  BLAS_OK(cublasGetVector(n, sizeof(float), dy, 2, back.data(), 4));
  bool same = true;
  for (int i = 0; i < n; ++i) same &= back[i * 4] == x[i * 3] && back[i * 4 + 1] == -9.0f;
  CHECK(same);
  CHECK(cublasSetVector(n, sizeof(float), x.data(), 0, dy, 2) == CUBLAS_STATUS_INVALID_VALUE);
  // What cuBLAS refuses before it computes anything.
  const float one = 1.0f;
  CHECK(cublasSetPointerMode(h, static_cast<cublasPointerMode_t>(2)) == CUBLAS_STATUS_INVALID_VALUE);
  CHECK(cublasSgemv(h, CUBLAS_OP_N, 4, 4, &one, dy, 4, dy, 0, &one, dy, 1) == CUBLAS_STATUS_INVALID_VALUE);
  CHECK(cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, 4, 4, 4, &one, dy, 3, dy, 4, &one, dy, 4) ==
        CUBLAS_STATUS_INVALID_VALUE);
  CHECK(cublasGemmEx(h, CUBLAS_OP_N, CUBLAS_OP_N, 2, 2, 2, &one, dy, CUDA_R_16F, 2, dy, CUDA_R_32F, 2, &one,
                     dy, CUDA_R_32F, 2, CUBLAS_COMPUTE_32F,
                     CUBLAS_GEMM_DEFAULT) == CUBLAS_STATUS_NOT_SUPPORTED);
  // A 5 x 4 matrix between leading dimensions 7 (host) and 6 (device), synchronously and on a stream.
  const int rows = 5, cols = 4;
  std::vector<double> a = Quarters<double>(7 * cols, 2), out(8 * cols, 3.0);
  double* da = ToDevice(std::vector<double>(6 * cols, 0.0));
  BLAS_OK(cublasSetMatrix(rows, cols, sizeof(double), a.data(), 7, da, 6));
  cudaStream_t stream = nullptr;
  CUDA_OK(cudaStreamCreate(&stream));
  BLAS_OK(cublasGetMatrixAsync(rows, cols, sizeof(double), da, 6, out.data(), 8, stream));
  CUDA_OK(cudaStreamSynchronize(stream));
  same = true;
  for (int j = 0; j < cols; ++j)
    for (int i = 0; i < 8; ++i) same &= out[j * 8 + i] == (i < rows ? a[j * 7 + i] : 3.0);
  CHECK(same);
  std::vector<float> y(n, 0.0f);
  BLAS_OK(cublasSetVectorAsync(n, sizeof(float), x.data(), 1, dy, 1, stream));
  BLAS_OK(cublasGetVectorAsync(n, sizeof(float), dy, 1, y.data(), 1, stream));
  CUDA_OK(cudaStreamSynchronize(stream));
  CHECK(std::equal(y.begin(), y.end(), x.begin()));
  // lda below the rows: the copy under it fails (its pitch is smaller than its rows). Whatever it
  // left as the thread's last error is this program's to clear.
  CHECK(cublasSetMatrix(rows, cols, sizeof(double), a.data(), 4, da, 6) == CUBLAS_STATUS_MAPPING_ERROR);
  (void)cudaGetLastError();
  CUDA_OK(cudaStreamDestroy(stream));
}

template <typename T, typename Api>
void Level1(cublasHandle_t h, Api api) {
  const int n = 24;
  std::vector<T> x = Quarters<T>(n, 3), y = Quarters<T>(n * 2, 4);
  x[17] = T(-5);  // the largest magnitude
  T* dx = ToDevice(x);
  T* dy = ToDevice(y);
  const T alpha = T(1.5);
  BLAS_OK(api.axpy(h, n, &alpha, dx, 1, dy, 2));
  for (int i = 0; i < n; ++i) y[i * 2] += alpha * x[i];
  CHECK(ToHost(dy, y.size()) == y);
  T dot = 0, nrm2 = 0, asum = 0;
  int imax = 0, imin = 0;
  BLAS_OK(api.dot(h, n, dx, 1, dy, 2, &dot));
  BLAS_OK(api.nrm2(h, n, dx, 1, &nrm2));
  BLAS_OK(api.asum(h, n, dx, 1, &asum));
  BLAS_OK(api.iamax(h, n, dx, 1, &imax));
  BLAS_OK(api.iamin(h, n, dx, 1, &imin));
  T want_dot = 0, want_asum = 0, squares = 0;
  int want_min = 0;
  for (int i = 0; i < n; ++i) {
    want_dot += x[i] * y[i * 2];
    want_asum += std::fabs(x[i]);
    squares += x[i] * x[i];
    if (std::fabs(x[i]) < std::fabs(x[want_min])) want_min = i;
  }
  CHECK(dot == want_dot && asum == want_asum && imax == 18 && imin == want_min + 1);
  CHECK(std::fabs(nrm2 - std::sqrt(squares)) <= T(1e-5) * std::sqrt(squares));
  const T three = T(3), c = T(0.5), s = T(0.75);
  BLAS_OK(api.scal(h, n, &three, dx, 1));
  for (T& v : x) v *= three;
  BLAS_OK(api.rot(h, n, dx, 1, dy, 2, &c, &s));
  for (int i = 0; i < n; ++i) {
    const T xi = x[i], yi = y[i * 2];
    x[i] = c * xi + s * yi;
    y[i * 2] = c * yi - s * xi;
  }
  CHECK(ToHost(dx, x.size()) == x);
  CHECK(ToHost(dy, y.size()) == y);
  BLAS_OK(api.swap(h, n, dx, 1, dy, 2));
  BLAS_OK(api.copy(h, n, dy, 2, dx, 1));  // x gets back what swap put in y: x
  CHECK(ToHost(dx, x.size()) == x);
  // Device pointer mode: alpha read, dot and iamax written on the device.
  T* scalars = ToDevice(std::vector<T>{T(2), T(0)});
  int* index = ToDevice(std::vector<int>{0});
  BLAS_OK(cublasSetPointerMode(h, CUBLAS_POINTER_MODE_DEVICE));
  BLAS_OK(api.axpy(h, n, scalars, dx, 1, dx, 1));  // x = 3 x
  BLAS_OK(api.dot(h, n, dx, 1, dx, 1, scalars + 1));
  BLAS_OK(api.iamax(h, n, dx, 1, index));
  BLAS_OK(cublasSetPointerMode(h, CUBLAS_POINTER_MODE_HOST));
  T sum = 0;
  for (T& v : x) v *= T(3);
  for (T v : x) sum += v * v;
  CHECK(ToHost(dx, x.size()) == x);
  // Squares of 1/32 steps summed past fp32's 24 bits: the order of the additions shows.
  CHECK(std::fabs(ToHost(scalars + 1, 1)[0] - sum) <= T(1e-5) * sum);
  CHECK(ToHost(index, 1)[0] == 18);
}

template <typename T, typename Api>
void Level2(cublasHandle_t h, Api api) {
  const int m = 7, n = 5;
  const std::vector<T> a = Quarters<T>(m * n, 5), x = Quarters<T>(m, 6), y = Quarters<T>(n, 7);
  T* da = ToDevice(a);
  T* dy = ToDevice(y);
  const T alpha = T(2), beta = T(0.5);
  BLAS_OK(api.gemv(h, CUBLAS_OP_T, m, n, &alpha, da, m, ToDevice(x), 1, &beta, dy, 1));
  std::vector<T> want = y;
  for (int j = 0; j < n; ++j) {
    T s = 0;
    for (int i = 0; i < m; ++i) s += a[j * m + i] * x[i];
    want[j] = alpha * s + beta * y[j];
  }
  CHECK(ToHost(dy, n) == want);
  BLAS_OK(api.ger(h, m, n, &alpha, ToDevice(x), 1, ToDevice(y), 1, da, m));
  std::vector<T> ger = a;
  for (int j = 0; j < n; ++j)
    for (int i = 0; i < m; ++i) ger[j * m + i] += alpha * x[i] * y[j];
  CHECK(ToHost(da, a.size()) == ger);
  // A lower triangle with a dominant diagonal: symv, trmv, then trsv back to x.
  std::vector<T> t(n * n, T(100));
  for (int j = 0; j < n; ++j)
    for (int i = j; i < n; ++i) t[j * n + i] = i == j ? T(2) : T((i + j) % 3) / T(8);
  T* dt = ToDevice(t);
  const std::vector<T> v = Quarters<T>(n, 8);
  T* dv = ToDevice(v);
  T* dsym = ToDevice(std::vector<T>(n, T(0)));
  const T one = T(1), zero = T(0);
  BLAS_OK(api.symv(h, CUBLAS_FILL_MODE_LOWER, n, &one, dt, n, dv, 1, &zero, dsym, 1));
  std::vector<T> sym(n, T(0)), tri(n, T(0));
  for (int i = 0; i < n; ++i)
    for (int j = 0; j < n; ++j) {
      sym[i] += t[i >= j ? j * n + i : i * n + j] * v[j];
      if (j <= i) tri[i] += t[j * n + i] * v[j];
    }
  CHECK(ToHost(dsym, n) == sym);
  BLAS_OK(api.trmv(h, CUBLAS_FILL_MODE_LOWER, CUBLAS_OP_N, CUBLAS_DIAG_NON_UNIT, n, dt, n, dv, 1));
  CHECK(ToHost(dv, n) == tri);
  BLAS_OK(api.trsv(h, CUBLAS_FILL_MODE_LOWER, CUBLAS_OP_N, CUBLAS_DIAG_NON_UNIT, n, dt, n, dv, 1));
  const std::vector<T> solved = ToHost(dv, n);
  bool close = true;
  for (int i = 0; i < n; ++i) close &= std::fabs(solved[i] - v[i]) < T(1e-5);
  CHECK(close);
}

template <typename T, typename Api>
void Level3(cublasHandle_t h, Api api, cudaDataType type) {
  const int m = 6, n = 4, k = 3;
  const std::vector<T> a = Quarters<T>(k * m, 9), b = Quarters<T>(k * n, 10), c = Quarters<T>(m * n, 11);
  T* dc = ToDevice(c);
  const T alpha = T(0.5), beta = T(-1);
  BLAS_OK(
      api.gemm(h, CUBLAS_OP_T, CUBLAS_OP_N, m, n, k, &alpha, ToDevice(a), k, ToDevice(b), k, &beta, dc, m));
  CHECK(ToHost(dc, c.size()) == Gemm(true, false, false, m, n, k, alpha, a, k, b, k, beta, c, m));
  // Three entries of a pointer-array batch, each its own matrices, and the same three strided.
  const int batch = 3;
  std::vector<std::vector<T>> as, bs, cs;
  std::vector<const T*> pa, pb;
  std::vector<T*> pc;
  std::vector<T> strided_a, strided_b, strided_c;
  for (int e = 0; e < batch; ++e) {
    as.push_back(Quarters<T>(m * k, 20 + e));
    bs.push_back(Quarters<T>(k * n, 30 + e));
    cs.push_back(Quarters<T>(m * n, 40 + e));
    pa.push_back(ToDevice(as[e]));
    pb.push_back(ToDevice(bs[e]));
    pc.push_back(ToDevice(cs[e]));
    strided_a.insert(strided_a.end(), as[e].begin(), as[e].end());
    strided_b.insert(strided_b.end(), bs[e].begin(), bs[e].end());
    strided_c.insert(strided_c.end(), cs[e].begin(), cs[e].end());
  }
  BLAS_OK(api.gemm_batched(h, CUBLAS_OP_N, CUBLAS_OP_N, m, n, k, &alpha, ToDevice(pa), m, ToDevice(pb), k,
                           &beta, ToDevice(pc), m, batch));
  T* dsc = ToDevice(strided_c);
  BLAS_OK(api.gemm_strided(h, CUBLAS_OP_N, CUBLAS_OP_N, m, n, k, &alpha, ToDevice(strided_a), m, m * k,
                           ToDevice(strided_b), k, k * n, &beta, dsc, m, m * n, batch));
  const std::vector<T> strided = ToHost(dsc, strided_c.size());
  for (int e = 0; e < batch; ++e) {
    const std::vector<T> want = Gemm(false, false, false, m, n, k, alpha, as[e], m, bs[e], k, beta, cs[e], m);
    CHECK(ToHost(pc[e], want.size()) == want);
    CHECK(std::equal(want.begin(), want.end(), strided.begin() + e * m * n));
  }
  // GemmBatchedEx over the same arrays: C = A B again, into the entries' C.
  const T one = T(1), zero = T(0);
  const void* const* ea = reinterpret_cast<const void* const*>(ToDevice(pa));
  const void* const* eb = reinterpret_cast<const void* const*>(ToDevice(pb));
  void* const* ec = reinterpret_cast<void* const*>(ToDevice(pc));
  const cublasComputeType_t compute = type == CUDA_R_32F ? CUBLAS_COMPUTE_32F : CUBLAS_COMPUTE_64F;
  if (type == CUDA_R_32F) {
    BLAS_OK(cublasGemmBatchedEx(h, CUBLAS_OP_N, CUBLAS_OP_N, m, n, k, &one, ea, type, m, eb, type, k, &zero,
                                ec, type, m, batch, compute, CUBLAS_GEMM_DEFAULT));
    for (int e = 0; e < batch; ++e) {
      CHECK(ToHost(pc[e], cs[e].size()) ==
            Gemm(false, false, false, m, n, k, one, as[e], m, bs[e], k, zero, cs[e], m));
    }
  }
  // trsm: a dominant lower-triangular A (left, m x m) solves alpha B in place.
  std::vector<T> l(m * m, T(100));
  for (int j = 0; j < m; ++j)
    for (int i = j; i < m; ++i) l[j * m + i] = i == j ? T(2) : T(1) / T(8);
  T* db = ToDevice(c);
  BLAS_OK(api.trsm(h, CUBLAS_SIDE_LEFT, CUBLAS_FILL_MODE_LOWER, CUBLAS_OP_N, CUBLAS_DIAG_NON_UNIT, m, n,
                   &alpha, ToDevice(l), m, db, m));
  const std::vector<T> xs = ToHost(db, c.size());
  bool solved = true;
  for (int j = 0; j < n; ++j)
    for (int i = 0; i < m; ++i) {
      T s = 0;
      for (int p = 0; p <= i; ++p) s += l[p * m + i] * xs[j * m + p];
      solved &= std::fabs(s - alpha * c[j * m + i]) < T(1e-5);
    }
  CHECK(solved);
  // syrk (lower triangle of C = A^T A with A k x m), geam (C = A^T + B), dgmm (C = diag(x) C).
  T* dsy = ToDevice(std::vector<T>(m * m, T(7)));
  BLAS_OK(api.syrk(h, CUBLAS_FILL_MODE_LOWER, CUBLAS_OP_T, m, k, &one, ToDevice(a), k, &zero, dsy, m));
  const std::vector<T> sy = ToHost(dsy, m * m);
  bool syrk_ok = true;
  for (int j = 0; j < m; ++j)
    for (int i = 0; i < m; ++i) {
      T s = 0;
      for (int p = 0; p < k; ++p) s += a[i * k + p] * a[j * k + p];
      syrk_ok &= sy[j * m + i] == (i >= j ? s : T(7));
    }
  CHECK(syrk_ok);
  T* dge = ToDevice(std::vector<T>(m * k, T(0)));
  BLAS_OK(
      api.geam(h, CUBLAS_OP_T, CUBLAS_OP_N, m, k, &one, ToDevice(a), k, &beta, ToDevice(as[0]), m, dge, m));
  const std::vector<T> ge = ToHost(dge, m * k);
  bool geam_ok = true;
  for (int j = 0; j < k; ++j)
    for (int i = 0; i < m; ++i) geam_ok &= ge[j * m + i] == a[i * k + j] + beta * as[0][j * m + i];
  CHECK(geam_ok);
  const std::vector<T> d = Quarters<T>(m, 12);
  T* ddg = ToDevice(std::vector<T>(m * n, T(0)));
  BLAS_OK(api.dgmm(h, CUBLAS_SIDE_LEFT, m, n, ToDevice(c), m, ToDevice(d), 1, ddg, m));
  const std::vector<T> dg = ToHost(ddg, m * n);
  bool dgmm_ok = true;
  for (int j = 0; j < n; ++j)
    for (int i = 0; i < m; ++i) dgmm_ok &= dg[j * m + i] == d[i] * c[j * m + i];
  CHECK(dgmm_ok);
}

// The API of one precision, as function pointers of cublas_v2.h's names.
template <typename T>
struct Api;
template <>
struct Api<float> {
  decltype(&cublasSaxpy) axpy = cublasSaxpy;
  decltype(&cublasSdot) dot = cublasSdot;
  decltype(&cublasSnrm2) nrm2 = cublasSnrm2;
  decltype(&cublasSasum) asum = cublasSasum;
  decltype(&cublasIsamax) iamax = cublasIsamax;
  decltype(&cublasIsamin) iamin = cublasIsamin;
  decltype(&cublasSscal) scal = cublasSscal;
  decltype(&cublasSrot) rot = cublasSrot;
  decltype(&cublasSswap) swap = cublasSswap;
  decltype(&cublasScopy) copy = cublasScopy;
  decltype(&cublasSgemv) gemv = cublasSgemv;
  decltype(&cublasSger) ger = cublasSger;
  decltype(&cublasSsymv) symv = cublasSsymv;
  decltype(&cublasStrmv) trmv = cublasStrmv;
  decltype(&cublasStrsv) trsv = cublasStrsv;
  decltype(&cublasSgemm) gemm = cublasSgemm;
  decltype(&cublasSgemmBatched) gemm_batched = cublasSgemmBatched;
  decltype(&cublasSgemmStridedBatched) gemm_strided = cublasSgemmStridedBatched;
  decltype(&cublasStrsm) trsm = cublasStrsm;
  decltype(&cublasSsyrk) syrk = cublasSsyrk;
  decltype(&cublasSgeam) geam = cublasSgeam;
  decltype(&cublasSdgmm) dgmm = cublasSdgmm;
};
template <>
struct Api<double> {
  decltype(&cublasDaxpy) axpy = cublasDaxpy;
  decltype(&cublasDdot) dot = cublasDdot;
  decltype(&cublasDnrm2) nrm2 = cublasDnrm2;
  decltype(&cublasDasum) asum = cublasDasum;
  decltype(&cublasIdamax) iamax = cublasIdamax;
  decltype(&cublasIdamin) iamin = cublasIdamin;
  decltype(&cublasDscal) scal = cublasDscal;
  decltype(&cublasDrot) rot = cublasDrot;
  decltype(&cublasDswap) swap = cublasDswap;
  decltype(&cublasDcopy) copy = cublasDcopy;
  decltype(&cublasDgemv) gemv = cublasDgemv;
  decltype(&cublasDger) ger = cublasDger;
  decltype(&cublasDsymv) symv = cublasDsymv;
  decltype(&cublasDtrmv) trmv = cublasDtrmv;
  decltype(&cublasDtrsv) trsv = cublasDtrsv;
  decltype(&cublasDgemm) gemm = cublasDgemm;
  decltype(&cublasDgemmBatched) gemm_batched = cublasDgemmBatched;
  decltype(&cublasDgemmStridedBatched) gemm_strided = cublasDgemmStridedBatched;
  decltype(&cublasDtrsm) trsm = cublasDtrsm;
  decltype(&cublasDsyrk) syrk = cublasDsyrk;
  decltype(&cublasDgeam) geam = cublasDgeam;
  decltype(&cublasDdgmm) dgmm = cublasDdgmm;
};

// Complex, half and bfloat16 GEMMs.
void OtherTypes(cublasHandle_t h) {
  using CF = std::complex<float>;
  const int m = 3, n = 2, k = 2;
  std::vector<CF> a(k * m), b(k * n), c(m * n);
  const std::vector<float> q = Quarters<float>(32, 13);
  for (size_t i = 0; i < a.size(); ++i) a[i] = {q[i], q[i + 1]};
  for (size_t i = 0; i < b.size(); ++i) b[i] = {q[i + 7], -q[i]};
  for (size_t i = 0; i < c.size(); ++i) c[i] = {q[i + 3], q[i + 5]};
  const CF alpha{1.0f, 0.5f}, beta{0.0f, 1.0f};
  CF* dc = ToDevice(c);
  BLAS_OK(cublasCgemm(h, CUBLAS_OP_C, CUBLAS_OP_N, m, n, k, reinterpret_cast<const cuComplex*>(&alpha),
                      reinterpret_cast<const cuComplex*>(ToDevice(a)), k,
                      reinterpret_cast<const cuComplex*>(ToDevice(b)), k,
                      reinterpret_cast<const cuComplex*>(&beta), reinterpret_cast<cuComplex*>(dc), m));
  CHECK(ToHost(dc, c.size()) == Gemm(true, false, true, m, n, k, alpha, a, k, b, k, beta, c, m));
  using CD = std::complex<double>;
  std::vector<CD> za(a.begin(), a.end()), zb(b.begin(), b.end()), zc(c.begin(), c.end());
  const CD zalpha{0.5, -1.0}, zbeta{1.0, 0.0};
  CD* dzc = ToDevice(zc);
  BLAS_OK(cublasZgemm(h, CUBLAS_OP_T, CUBLAS_OP_N, m, n, k, reinterpret_cast<const cuDoubleComplex*>(&zalpha),
                      reinterpret_cast<const cuDoubleComplex*>(ToDevice(za)), k,
                      reinterpret_cast<const cuDoubleComplex*>(ToDevice(zb)), k,
                      reinterpret_cast<const cuDoubleComplex*>(&zbeta),
                      reinterpret_cast<cuDoubleComplex*>(dzc), m));
  CHECK(ToHost(dzc, zc.size()) == Gemm(true, false, false, m, n, k, zalpha, za, k, zb, k, zbeta, zc, m));
  // fp16 throughout (Hgemm, and a strided batch of two through GemmStridedBatchedEx computing in
  // fp32), bf16 inputs into fp32: quarters stay exact in 16 bits.
  const int hm = 4, hn = 4, hk = 4;
  const std::vector<float> fa = Quarters<float>(hm * hk, 14), fb = Quarters<float>(hk * hn, 15);
  const std::vector<float> want = Gemm(false, false, false, hm, hn, hk, 1.0f, fa, hm, fb, hk, 0.0f,
                                       std::vector<float>(hm * hn, 0.0f), hm);
  std::vector<__half> ha, hb;
  std::vector<__nv_bfloat16> ba, bb;
  for (float v : fa) {
    ha.push_back(__float2half(v));
    ba.push_back(__float2bfloat16(v));
  }
  for (float v : fb) {
    hb.push_back(__float2half(v));
    bb.push_back(__float2bfloat16(v));
  }
  const __half h_one = __float2half(1.0f), h_zero = __float2half(0.0f);
  __half* dhc = ToDevice(std::vector<__half>(hm * hn));
  BLAS_OK(cublasHgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, hm, hn, hk, &h_one, ToDevice(ha), hm, ToDevice(hb), hk,
                      &h_zero, dhc, hm));
  const std::vector<__half> hc = ToHost(dhc, want.size());
  bool half_ok = true;
  for (size_t i = 0; i < want.size(); ++i) half_ok &= __half2float(hc[i]) == want[i];
  CHECK(half_ok);
  std::vector<__half> ha2 = ha, hb2 = hb;
  ha2.insert(ha2.end(), ha.begin(), ha.end());
  hb2.insert(hb2.end(), hb.begin(), hb.end());
  float* dfc = ToDevice(std::vector<float>(2 * hm * hn, -1.0f));
  const float one = 1.0f, zero = 0.0f;
  BLAS_OK(cublasGemmStridedBatchedEx(h, CUBLAS_OP_N, CUBLAS_OP_N, hm, hn, hk, &one, ToDevice(ha2), CUDA_R_16F,
                                     hm, hm * hk, ToDevice(hb2), CUDA_R_16F, hk, hk * hn, &zero, dfc,
                                     CUDA_R_32F, hm, hm * hn, 2, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
  const std::vector<float> twice = ToHost(dfc, 2 * want.size());
  CHECK(std::equal(want.begin(), want.end(), twice.begin()) &&
        std::equal(want.begin(), want.end(), twice.begin() + 16));
  float* dbc = ToDevice(std::vector<float>(hm * hn, -1.0f));
  BLAS_OK(cublasGemmEx(h, CUBLAS_OP_N, CUBLAS_OP_N, hm, hn, hk, &one, ToDevice(ba), CUDA_R_16BF, hm,
                       ToDevice(bb), CUDA_R_16BF, hk, &zero, dbc, CUDA_R_32F, hm, CUBLAS_COMPUTE_32F,
                       CUBLAS_GEMM_DEFAULT));
  CHECK(ToHost(dbc, want.size()) == want);
}

}  // namespace

int main() {
  cublasHandle_t h = nullptr;
  if (cublasCreate(&h) != CUBLAS_STATUS_SUCCESS) {
    std::printf("CHECK FAILED: cublasCreate\n");
    return 1;
  }
  Helpers(h);
  Level1<float>(h, Api<float>{});
  Level1<double>(h, Api<double>{});
  Level2<float>(h, Api<float>{});
  Level2<double>(h, Api<double>{});
  Level3<float>(h, Api<float>{}, CUDA_R_32F);
  Level3<double>(h, Api<double>{}, CUDA_R_64F);
  OtherTypes(h);
  CUDA_OK(cudaDeviceSynchronize());
  CUDA_OK(cudaGetLastError());
  BLAS_OK(cublasDestroy(h));
  for (void* p : g_allocations) CUDA_OK(cudaFree(p));
  std::printf("blas report: %d checks, %s\n", g_checks,
              g_failures == 0 ? "all checks held" : "checks failed");
  return g_failures == 0 ? 0 : 1;
}
