-- wrk script for bench/load.sh: POSTs one mlp request and counts, per answer, a status outside
-- 2xx or a body different from the reference answer (PHOS_LOAD_BODY, PHOS_LOAD_EXPECTED).
local threads = {}

function setup(thread)
  table.insert(threads, thread)
end

function init(args)
  non2xx = 0
  wrong = 0
  expected = os.getenv("PHOS_LOAD_EXPECTED")
  wrk.method = "POST"
  wrk.body = os.getenv("PHOS_LOAD_BODY")
  wrk.headers["Content-Type"] = "application/json"
end

function response(status, headers, body)
  if status < 200 or status > 299 then
    non2xx = non2xx + 1
  elseif body ~= expected then
    wrong = wrong + 1
  end
end

function done(summary, latency, requests)
  local n, w = 0, 0
  for _, t in ipairs(threads) do
    n = n + t:get("non2xx")
    w = w + t:get("wrong")
  end
  local e = summary.errors
  io.write(string.format("requests %d in %.1f s: %.1f/s\n", summary.requests, summary.duration / 1e6,
                         summary.requests / (summary.duration / 1e6)))
  io.write(string.format("latency ms: p50 %.3f p90 %.3f p99 %.3f p99.9 %.3f max %.3f\n",
                         latency:percentile(50) / 1000, latency:percentile(90) / 1000,
                         latency:percentile(99) / 1000, latency:percentile(99.9) / 1000, latency.max / 1000))
  io.write(string.format("errors: non-2xx %d wrong-answer %d connect %d read %d write %d timeout %d\n", n, w,
                         e.connect, e.read, e.write, e.timeout))
end
