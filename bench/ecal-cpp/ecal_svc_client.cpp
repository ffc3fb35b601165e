// eCAL 6.1.1 C++ service client of `shoal perf --service --against ecal` (and of its mixed rows, eCAL client ->
// shoal server). It measures itself: every call's round trip, on as many threads as asked, each with a client of
// its own.
//
// Usage: shoal-ecal-svc-client --service NAME --clients MAX [--unit UNIT]
// Creates MAX clients of service NAME and waits (up to 30 s) until each is connected to a server, then prints
// {"event":"ready","servers":N}. Commands on stdin, one per line:
//   run SIZE CLIENTS CALLS WARMUP TIMEOUT_MS
//       CLIENTS threads (at most MAX) each make WARMUP calls of method "echo" with a SIZE-byte request, then, all
//       threads at once, CALLS timed calls each. A call is answered when exactly one response came, executed,
//       equal to the request; else it timed out (a response in state timeouted) or failed. A thread stops after
//       10 calls that were not answered. Prints {"event":"done","size","clients","calls","failed","timed_out",
//       "error","elapsed_ns","rtt_ns":[...],"cpu_user_us","cpu_sys_us","peak_rss_kb"}: calls = timed calls made,
//       rtt_ns = the round trip of each answered one, failed and timed_out = over warm-up and timed calls, error =
//       the first failure's description, elapsed = from the start of the timed calls to the end of the last, cpu =
//       this process's during the command, rss = its peak.
//   quit   (or the end of stdin) exits 0.
// Exit codes: 1 no server connected or eCAL refused something, 2 bad arguments.

#include <ecal/ecal.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstring>
#include <iostream>
#include <memory>
#include <mutex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "common.h"

namespace
{
using Clock = std::chrono::steady_clock;

// A thread stops after this many calls that were not answered.
constexpr long long MAX_FAILURES = 10;

struct ThreadResult
{
  std::vector<long long> rtt_ns;
  long long made = 0;
  long long failed = 0;
  long long timed_out = 0;
  std::string error;
};

// One call of "echo": its round trip in ns when answered as asked, else -1 (the failure recorded in `r`).
long long call_once(const eCAL::CServiceClient& client, const std::string& request, int timeout_ms, ThreadResult& r)
{
  eCAL::ServiceResponseVecT responses;
  const auto t0 = Clock::now();
  client.CallWithResponse("echo", request, responses, timeout_ms);
  const auto t1 = Clock::now();
  if (responses.size() == 1 && responses[0].call_state == eCAL::eCallState::executed &&
      responses[0].response == request)
  {
    return std::chrono::duration_cast<std::chrono::nanoseconds>(t1 - t0).count();
  }
  const bool timed_out = std::any_of(responses.begin(), responses.end(), [](const eCAL::SServiceResponse& s) {
    return s.call_state == eCAL::eCallState::timeouted;
  });
  (timed_out ? r.timed_out : r.failed) += 1;
  if (r.error.empty())
  {
    std::ostringstream e;
    e << responses.size() << " responses";
    for (const auto& s : responses)
    {
      e << "; state " << static_cast<int>(s.call_state) << ", " << s.response.size() << " B";
      if (!s.error_msg.empty())
      {
        e << ", " << s.error_msg;
      }
    }
    r.error = e.str();
  }
  return -1;
}

std::string json_escape(const std::string& s)
{
  std::string out;
  for (const char c : s)
  {
    if (c == '"' || c == '\\')
    {
      out += '\\';
      out += c;
    }
    else if (static_cast<unsigned char>(c) < 0x20)
    {
      out += ' ';
    }
    else
    {
      out += c;
    }
  }
  return out;
}

void run(const std::vector<std::unique_ptr<eCAL::CServiceClient>>& clients, size_t size, size_t n_clients,
         long long calls, long long warmup, int timeout_ms)
{
  const shoal_perf::CpuTime cpu0 = shoal_perf::CpuTime::now();
  std::vector<ThreadResult> results(n_clients);
  std::mutex m;
  std::condition_variable cv;
  size_t warm = 0;
  bool go = false;
  std::vector<std::thread> threads;
  for (size_t t = 0; t < n_clients; ++t)
  {
    threads.emplace_back([&, t] {
      ThreadResult& r = results[t];
      r.rtt_ns.reserve(static_cast<size_t>(calls));
      std::string request(size, '\0');
      for (size_t i = 0; i < size; ++i)
      {
        request[i] = static_cast<char>((t * 31 + i) & 0xff);
      }
      const eCAL::CServiceClient& client = *clients[t];
      uint64_t seq = static_cast<uint64_t>(t) << 40;
      auto stamp = [&] { std::memcpy(&request[0], &seq, std::min(size, sizeof seq)); ++seq; };
      for (long long i = 0; i < warmup && r.failed + r.timed_out < MAX_FAILURES; ++i)
      {
        stamp();
        call_once(client, request, timeout_ms, r);
      }
      {
        std::unique_lock<std::mutex> lock(m);
        ++warm;
        cv.notify_all();
        cv.wait(lock, [&] { return go; });
      }
      for (long long i = 0; i < calls && r.failed + r.timed_out < MAX_FAILURES; ++i)
      {
        stamp();
        ++r.made;
        const long long rtt = call_once(client, request, timeout_ms, r);
        if (rtt >= 0)
        {
          r.rtt_ns.push_back(rtt);
        }
      }
    });
  }
  Clock::time_point start;
  {
    std::unique_lock<std::mutex> lock(m);
    cv.wait(lock, [&] { return warm == n_clients; });
    start = Clock::now();
    go = true;
    cv.notify_all();
  }
  for (auto& th : threads)
  {
    th.join();
  }
  const long long elapsed = std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now() - start).count();
  long long made = 0;
  long long failed = 0;
  long long timed_out = 0;
  std::string error;
  std::ostringstream rtts;
  bool first = true;
  for (const auto& r : results)
  {
    made += r.made;
    failed += r.failed;
    timed_out += r.timed_out;
    if (error.empty())
    {
      error = r.error;
    }
    for (const long long v : r.rtt_ns)
    {
      rtts << (first ? "" : ",") << v;
      first = false;
    }
  }
  std::ostringstream o;
  o << "{\"event\":\"done\",\"size\":" << size << ",\"clients\":" << n_clients << ",\"calls\":" << made
    << ",\"failed\":" << failed << ",\"timed_out\":" << timed_out << ",\"error\":\"" << json_escape(error)
    << "\",\"elapsed_ns\":" << elapsed << ",\"rtt_ns\":[" << rtts.str() << "]," << shoal_perf::usage_fields(cpu0) << "}";
  shoal_perf::emit(o.str());
}
}  // namespace

int main(int argc, char** argv)
{
  using namespace shoal_perf;
  json_stdout();
  die_with_parent();
  const std::string service = arg(argc, argv, "--service", "");
  const long max_clients = std::atol(arg(argc, argv, "--clients", "1").c_str());
  if (service.empty() || max_clients < 1 || max_clients > 1024)
  {
    fail("usage: shoal-ecal-svc-client --service NAME --clients MAX(1..1024) [--unit UNIT]", 2);
  }
  if (!eCAL::Initialize(arg(argc, argv, "--unit", "shoal_perf_ecal_client")))
  {
    fail("eCAL::Initialize failed");
  }
  {
    std::vector<std::unique_ptr<eCAL::CServiceClient>> clients;
    for (long i = 0; i < max_clients; ++i)
    {
      clients.emplace_back(new eCAL::CServiceClient(service));
    }
    const auto deadline = Clock::now() + std::chrono::seconds(30);
    size_t servers = 0;
    for (;;)
    {
      const bool all = std::all_of(clients.begin(), clients.end(), [](const auto& c) {
        return c->IsConnected() && !c->GetClientInstances().empty();
      });
      if (all)
      {
        servers = clients[0]->GetClientInstances().size();
        break;
      }
      if (Clock::now() > deadline)
      {
        fail("no server of service " + service + " connected within 30 s");
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    emit("{\"event\":\"ready\",\"servers\":" + std::to_string(servers) + "}");
    std::string line;
    while (std::getline(std::cin, line) && line != "quit")
    {
      std::istringstream cmd(line);
      std::string word;
      size_t size = 0;
      size_t n = 0;
      long long calls = 0;
      long long warmup = 0;
      int timeout_ms = 0;
      if (!(cmd >> word >> size >> n >> calls >> warmup >> timeout_ms) || word != "run" || size == 0 || n < 1 ||
          n > clients.size() || calls < 1 || warmup < 0 || timeout_ms < 1)
      {
        emit("{\"event\":\"error\",\"error\":\"bad command: expected run SIZE CLIENTS CALLS WARMUP TIMEOUT_MS\"}");
        continue;
      }
      run(clients, size, n, calls, warmup, timeout_ms);
    }
  }
  eCAL::Finalize();
  return 0;
}
