// Histogram bucket bounds for latencies: 1, 2.5 and 5 in every decade from `from` to `to`
// (seconds), so that one histogram resolves a 10 µs lease and a 3 s context creation alike. Every
// latency histogram phos exports uses this ladder.
#pragma once

#include <vector>

namespace phos {

inline std::vector<double> LatencyBuckets(double from, double to) {
  std::vector<double> bounds;
  for (double decade = from; decade <= to * 1.0001; decade *= 10) {
    for (double step : {1.0, 2.5, 5.0}) {
      if (decade * step <= to * 1.0001) bounds.push_back(decade * step);
    }
  }
  return bounds;
}

}  // namespace phos
