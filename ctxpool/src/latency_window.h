// The most recent N latency samples, for percentiles: a fixed ring, so recording on the lease
// path never allocates; percentiles sort a copy when metrics are read.
#pragma once

#include <algorithm>
#include <cstddef>
#include <vector>

namespace phos::ctxpool::detail {

class LatencyWindow {
 public:
  explicit LatencyWindow(size_t capacity) : samples_(std::max<size_t>(capacity, 1)) {}

  void Record(double value) {
    samples_[next_ % samples_.size()] = value;
    ++next_;
  }

  // The q-quantile (0..1, nearest rank) of the samples held; 0 when there are none.
  double Quantile(double q) const {
    size_t n = std::min(next_, samples_.size());
    if (n == 0) return 0;
    std::vector<double> sorted(samples_.begin(), samples_.begin() + static_cast<std::ptrdiff_t>(n));
    size_t rank = static_cast<size_t>(q * static_cast<double>(n - 1) + 0.5);
    std::nth_element(sorted.begin(), sorted.begin() + static_cast<std::ptrdiff_t>(rank), sorted.end());
    return sorted[rank];
  }

 private:
  std::vector<double> samples_;
  size_t next_ = 0;
};

}  // namespace phos::ctxpool::detail
