// eCAL 6.1.1 C++ publish/subscribe ping-pong of `shoal perf --pingpong --against ecal`, measured the way
// `shoal perf` measures shoal's block mode (tools/src/perf/pingpong.rs): the pinger copies a message whose first
// 16 bytes are a sequence number and a CLOCK_MONOTONIC timestamp into eCAL (CPublisher::Send of a buffer) on the
// ping topic; the ponger's receive callback copies the payload out into a buffer of its own and sends that buffer
// on the pong topic; the pinger's receive callback copies the echo out into a buffer and wakes the measuring thread
// (a condition variable), which waits for it with a deadline. eCAL's receive callbacks are its blocking receive
// (there is no polling receive in eCAL 6's C++ API), so this is eCAL's block mode. One-way latency = round trip / 2.
//
// eCAL as a user gets it: eCAL::Initialize with the unit name only (the defaults, or what an ecal.yaml eCAL finds
// says), CPublisher / CSubscriber with the default configuration. On one host eCAL's publisher serves a local
// subscriber over its shared-memory layer (layer_priority_local: shm first), and with the defaults of 6.1.1 (read
// in ecal/core/src at tag v6.1.1):
//   - zero_copy_mode off: Send copies the buffer into the publisher's payload buffer, then into the memory file;
//     the subscriber's observer thread copies the memory file into its receive buffer, releases the file and calls
//     the callback with that buffer (which this program copies out once more, as shoal perf's copying receive does);
//   - memfile_buffer_count 1 (one memory file per publisher), acknowledge_timeout_ms 0 (no handshake);
//   - memory file growth: a publisher's memory file starts at memfile_min_size_bytes (4096); a Send larger than the
//     file recreates it (CSyncMemoryFile::CheckSize) at header + size + memfile_reserve_percent (50 %) of size,
//     under a new name, then re-registers and sleeps 5 ms (CPublisherImpl::Write) so that subscribers can follow
//     the new name. Files never shrink. This program uses one ping and one pong topic for every size, as shoal perf
//     uses one pair of topics, so each larger size grows both files once, during its warm-up: a warm-up message
//     whose echo does not come within 1 s is counted (warmup_lost) and the next one is sent; nothing is tuned.
//
// Usage (what `shoal perf --pingpong --against ecal` runs; built by scripts/ecal-cpp):
//   shoal-ecal-pingpong --sizes 64,1048576 --warmups 1000,100 --iterations 10000,256 [--cpu N --peer-cpu M]
//                       [--unit NAME] [--topic PREFIX]
// Spawns the ponger (this program again, with --pong PREFIX, driven through its stdin), waits until both ends have
// matched (the ping publisher has a subscriber and the pong subscriber a publisher, then a probe came back; 30 s at
// most each, else an error saying which), and prints on stdout one JSON object per size:
//   {"size_bytes","iterations","messages","warmup","warmup_lost","p50_ns","p90_ns","p99_ns","p999_ns","max_ns",
//    "mean_ns","msgs_per_s","cpu_user_us","cpu_sys_us","peak_rss_kb","peer_cpu_user_us","peer_cpu_sys_us",
//    "peer_peak_rss_kb"}
// (percentiles of the one-way times of the timed round trips, nearest rank; cpu = each process's, all threads,
// over the timed round trips; rss = peak). An error is printed as {"event":"error","error":"..."} and on stderr.
// Exit codes: 1 eCAL refused something, did not match or an echo did not come, 2 bad arguments.

#include <ecal/ecal.h>

#include <fcntl.h>
#include <sched.h>
#include <spawn.h>
#include <sys/wait.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstdint>
#include <cstring>
#include <ctime>
#include <iomanip>
#include <iostream>
#include <mutex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "common.h"

extern char** environ;

namespace
{
using Clock = std::chrono::steady_clock;
using shoal_perf::fail;

// Bytes of the header at the start of every message (sequence, send time), as in shoal perf.
constexpr size_t HEADER_LEN = 16;
// How long matching may take, and the wait for a timed echo before the run fails.
constexpr auto MATCH_TIMEOUT = std::chrono::seconds(30);
constexpr auto RECV_TIMEOUT = std::chrono::seconds(10);
// A warm-up message not echoed within this is counted lost (memory file growth) and the next one is sent; more
// than MAX_WARMUP_LOST of them in one size fail the run.
constexpr auto WARMUP_WAIT = std::chrono::seconds(1);
constexpr long long MAX_WARMUP_LOST = 5;

template <typename T>
std::vector<T> parse_list(const std::string& s)
{
  std::vector<T> out;
  std::istringstream in(s);
  std::string item;
  while (std::getline(in, item, ','))
  {
    std::istringstream v(item);
    T x{};
    if (!(v >> x) || !v.eof())
    {
      fail("bad list item \"" + item + "\" in \"" + s + "\"", 2);
    }
    out.push_back(x);
  }
  return out;
}

void pin(const std::string& cpu)
{
  if (cpu.empty())
  {
    return;
  }
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(std::atoi(cpu.c_str()), &set);
  if (sched_setaffinity(0, sizeof set, &set) != 0)
  {
    fail("pinning to CPU " + cpu + ": " + std::strerror(errno));
  }
}

uint64_t mono_ns()
{
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1000000000ULL + static_cast<uint64_t>(ts.tv_nsec);
}

uint64_t seq_of(const void* buf, size_t len)
{
  uint64_t seq = 0;
  if (len >= sizeof seq)
  {
    std::memcpy(&seq, buf, sizeof seq);
  }
  return seq;
}

// One line of the control protocol on the private stdout (the ponger's answers to the pinger).
void say(const std::string& line)
{
  std::fputs(line.c_str(), shoal_perf::out_stream());
  std::fputc('\n', shoal_perf::out_stream());
  std::fflush(shoal_perf::out_stream());
}

eCAL::SDataTypeInformation bytes_type()
{
  eCAL::SDataTypeInformation t;
  t.name = "shoal.perf.Bytes";
  t.encoding = "raw";
  return t;
}

// The ponger: echoes every ping (copied out into `buf`, that buffer sent) until "quit" or the end of stdin. On
// "cpu" prints "cpu USER_US SYS_US PEAK_RSS_KB ECHOED SEND_FAILED".
int run_pong(const std::string& prefix, const std::string& unit)
{
  if (!eCAL::Initialize(unit))
  {
    fail("eCAL::Initialize failed (ponger)");
  }
  {
    eCAL::CPublisher pong(prefix + "_pong", bytes_type());
    eCAL::CSubscriber ping(prefix + "_ping", bytes_type());
    std::vector<char> buf;
    std::mutex m;
    long long echoed = 0;
    long long send_failed = 0;
    ping.SetReceiveCallback(
        [&](const eCAL::STopicId&, const eCAL::SDataTypeInformation&, const eCAL::SReceiveCallbackData& d) {
          const std::lock_guard<std::mutex> lock(m);
          buf.resize(d.buffer_size);
          std::memcpy(buf.data(), d.buffer, d.buffer_size);
          if (pong.Send(buf.data(), buf.size()))
          {
            ++echoed;
          }
          else
          {
            ++send_failed;
          }
        });
    say("ready");
    std::string line;
    while (std::getline(std::cin, line) && line != "quit")
    {
      if (line == "cpu")
      {
        const shoal_perf::CpuTime now = shoal_perf::CpuTime::now();
        long long e = 0;
        long long f = 0;
        {
          const std::lock_guard<std::mutex> lock(m);
          e = echoed;
          f = send_failed;
        }
        say("cpu " + std::to_string(now.user_us) + " " + std::to_string(now.sys_us) + " " +
            std::to_string(shoal_perf::peak_rss_kb()) + " " + std::to_string(e) + " " + std::to_string(f));
      }
      else
      {
        say("error unknown command");
      }
    }
    ping.RemoveReceiveCallback();
  }
  eCAL::Finalize();
  return 0;
}

// The ponger process as the pinger sees it: its pid, its stdin and its stdout.
struct Ponger
{
  pid_t pid = -1;
  FILE* in = nullptr;
  FILE* out = nullptr;

  std::string line()
  {
    char buf[512];
    if (std::fgets(buf, sizeof buf, out) == nullptr)
    {
      fail("the ponger exited (its error is above)");
    }
    std::string s(buf);
    while (!s.empty() && (s.back() == '\n' || s.back() == '\r'))
    {
      s.pop_back();
    }
    return s;
  }

  void command(const std::string& c)
  {
    if (std::fprintf(in, "%s\n", c.c_str()) < 0 || std::fflush(in) != 0)
    {
      fail("the ponger's stdin is closed (its error is above)");
    }
  }

  // The ponger's totals: user and system CPU (us), peak RSS (kB), messages echoed.
  struct Stats
  {
    long long user_us = 0;
    long long sys_us = 0;
    long long rss_kb = 0;
    long long echoed = 0;
    long long failed = 0;
  };

  Stats stats()
  {
    command("cpu");
    const std::string l = line();
    std::istringstream in(l);
    std::string word;
    Stats s;
    if (!(in >> word >> s.user_us >> s.sys_us >> s.rss_kb >> s.echoed >> s.failed) || word != "cpu")
    {
      fail("the ponger answered \"" + l + "\" to cpu");
    }
    return s;
  }
};

Ponger spawn_ponger(const std::string& prefix, const std::string& peer_cpu)
{
  char exe[4096];
  const ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
  if (n <= 0)
  {
    fail(std::string("readlink /proc/self/exe: ") + std::strerror(errno));
  }
  exe[n] = '\0';
  int to_child[2];
  int from_child[2];
  if (pipe2(to_child, O_CLOEXEC) != 0 || pipe2(from_child, O_CLOEXEC) != 0)
  {
    fail(std::string("pipe: ") + std::strerror(errno));
  }
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_adddup2(&fa, to_child[0], 0);
  posix_spawn_file_actions_adddup2(&fa, from_child[1], 1);
  std::vector<std::string> args = {exe, "--pong", prefix, "--unit", "shoal_perf_ecal_pong"};
  if (!peer_cpu.empty())
  {
    args.insert(args.end(), {"--peer-cpu", peer_cpu});
  }
  std::vector<char*> argv;
  for (auto& a : args)
  {
    argv.push_back(&a[0]);
  }
  argv.push_back(nullptr);
  Ponger p;
  const int rc = posix_spawn(&p.pid, exe, &fa, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&fa);
  if (rc != 0)
  {
    fail(std::string("starting the ponger: ") + std::strerror(rc));
  }
  close(to_child[0]);
  close(from_child[1]);
  p.in = fdopen(to_child[1], "w");
  p.out = fdopen(from_child[0], "r");
  if (p.in == nullptr || p.out == nullptr)
  {
    fail(std::string("fdopen: ") + std::strerror(errno));
  }
  return p;
}

// What the pinger's pong callback hands to the measuring thread: the last echo, copied out.
struct Echo
{
  std::mutex m;
  std::condition_variable cv;
  std::vector<char> buf;
  uint64_t seq = 0;
  size_t len = 0;

  // Waits until the echo of `seq` came (true) or `deadline` passed (false).
  bool wait(uint64_t want, Clock::time_point deadline)
  {
    std::unique_lock<std::mutex> lock(m);
    return cv.wait_until(lock, deadline, [&] { return seq == want; });
  }
};

// Nearest-rank percentile of sorted `v` (not empty).
long long percentile(const std::vector<long long>& v, double q)
{
  const size_t rank = static_cast<size_t>(std::ceil(q * static_cast<double>(v.size())));
  return v[std::min(v.size() - 1, rank == 0 ? 0 : rank - 1)];
}

int run_ping(int argc, char** argv)
{
  using shoal_perf::arg;
  const auto sizes = parse_list<size_t>(arg(argc, argv, "--sizes", ""));
  const auto warmups = parse_list<long long>(arg(argc, argv, "--warmups", ""));
  const auto iterations = parse_list<long long>(arg(argc, argv, "--iterations", ""));
  if (sizes.empty() || sizes.size() != warmups.size() || sizes.size() != iterations.size())
  {
    fail("usage: shoal-ecal-pingpong --sizes A,B --warmups A,B --iterations A,B [--cpu N --peer-cpu M] "
         "(one warm-up count and one iteration count per size)",
         2);
  }
  for (size_t i = 0; i < sizes.size(); ++i)
  {
    if (sizes[i] < HEADER_LEN || warmups[i] < 0 || iterations[i] < 1)
    {
      fail("sizes must be at least 16 B (the header), warm-ups at least 0 and iterations at least 1", 2);
    }
  }
  pin(arg(argc, argv, "--cpu", ""));
  const std::string prefix = arg(argc, argv, "--topic", "shoal_perf_ecal_pp_" + std::to_string(getpid()));
  if (!eCAL::Initialize(arg(argc, argv, "--unit", "shoal_perf_ecal_ping")))
  {
    fail("eCAL::Initialize failed (pinger)");
  }
  Ponger ponger = spawn_ponger(prefix, arg(argc, argv, "--peer-cpu", ""));
  {
    eCAL::CPublisher ping(prefix + "_ping", bytes_type());
    eCAL::CSubscriber pong(prefix + "_pong", bytes_type());
    Echo echo;
    echo.buf.reserve(*std::max_element(sizes.begin(), sizes.end()));
    pong.SetReceiveCallback(
        [&echo](const eCAL::STopicId&, const eCAL::SDataTypeInformation&, const eCAL::SReceiveCallbackData& d) {
          {
            const std::lock_guard<std::mutex> lock(echo.m);
            echo.buf.resize(d.buffer_size);
            std::memcpy(echo.buf.data(), d.buffer, d.buffer_size);
            echo.len = d.buffer_size;
            echo.seq = seq_of(d.buffer, d.buffer_size);
          }
          echo.cv.notify_one();
        });
    const std::string ready = ponger.line();
    if (ready != "ready")
    {
      fail("the ponger said \"" + ready + "\", expected ready");
    }
    // Both ends matched: eCAL's registration has connected the ping publisher with the ponger's subscriber and
    // the pong subscriber with the ponger's publisher.
    const auto match_deadline = Clock::now() + MATCH_TIMEOUT;
    while (ping.GetSubscriberCount() < 1 || pong.GetPublisherCount() < 1)
    {
      if (Clock::now() > match_deadline)
      {
        fail("the eCAL ping-pong did not match within 30 s: topic " + prefix + "_ping has " +
             std::to_string(ping.GetSubscriberCount()) + " subscribers (1 expected), " + prefix + "_pong " +
             std::to_string(pong.GetPublisherCount()) +
             " publishers (1 expected); eCAL's registration does not reach between the two processes");
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    std::vector<char> out(*std::max_element(sizes.begin(), sizes.end()), 0);
    uint64_t seq = 0;
    // A fresh sequence number and the send time into the header of `out`.
    auto stamp = [&] {
      ++seq;
      const uint64_t now = mono_ns();
      std::memcpy(out.data(), &seq, sizeof seq);
      std::memcpy(out.data() + 8, &now, sizeof now);
    };
    // Probes at the first size until one comes back: the shared-memory connection carries both ways.
    for (;;)
    {
      stamp();
      ping.Send(out.data(), sizes[0]);
      if (echo.wait(seq, Clock::now() + std::chrono::milliseconds(50)))
      {
        break;
      }
      if (Clock::now() > match_deadline + MATCH_TIMEOUT)
      {
        fail("the eCAL ping-pong matched but no probe came back within 30 s (" + std::to_string(sizes[0]) + " B)");
      }
    }
    for (size_t i = 0; i < sizes.size(); ++i)
    {
      const size_t size = sizes[i];
      long long warmup_lost = 0;
      for (long long w = 0; w < warmups[i]; ++w)
      {
        stamp();
        const bool sent = ping.Send(out.data(), size);
        if (!sent || !echo.wait(seq, Clock::now() + WARMUP_WAIT))
        {
          if (++warmup_lost > MAX_WARMUP_LOST)
          {
            fail("more than " + std::to_string(MAX_WARMUP_LOST) + " warm-up messages of " + std::to_string(size) +
                 " B were not echoed within 1 s each (last: " + (sent ? "no echo" : "Send returned false") + ")");
          }
        }
      }
      std::vector<long long> one_way;
      one_way.reserve(static_cast<size_t>(iterations[i]));
      const Ponger::Stats peer0 = ponger.stats();
      const shoal_perf::CpuTime cpu0 = shoal_perf::CpuTime::now();
      const auto start = Clock::now();
      for (long long n = 0; n < iterations[i]; ++n)
      {
        stamp();
        const auto t0 = Clock::now();
        if (!ping.Send(out.data(), size))
        {
          fail("CPublisher::Send of " + std::to_string(size) + " B returned false (seq " + std::to_string(seq) + ")");
        }
        if (!echo.wait(seq, t0 + RECV_TIMEOUT))
        {
          fail("no echo within 10 s: sent seq " + std::to_string(seq) + " (" + std::to_string(size) + " B)");
        }
        const auto t1 = Clock::now();
        size_t len = 0;
        {
          const std::lock_guard<std::mutex> lock(echo.m);
          len = echo.len;
        }
        if (len != size)
        {
          fail("echo mismatch: sent seq " + std::to_string(seq) + " (" + std::to_string(size) + " B), got " +
               std::to_string(len) + " B");
        }
        one_way.push_back(
            std::max<long long>(1, std::chrono::duration_cast<std::chrono::nanoseconds>(t1 - t0).count() / 2));
      }
      const double elapsed = std::chrono::duration<double>(Clock::now() - start).count();
      const shoal_perf::CpuTime cpu1 = shoal_perf::CpuTime::now();
      const Ponger::Stats peer1 = ponger.stats();
      double sum = 0;
      for (const long long v : one_way)
      {
        sum += static_cast<double>(v);
      }
      std::sort(one_way.begin(), one_way.end());
      std::ostringstream o;
      o << std::fixed << std::setprecision(1);
      o << "{\"size_bytes\":" << size << ",\"iterations\":" << iterations[i] << ",\"messages\":" << one_way.size()
        << ",\"warmup\":" << warmups[i] << ",\"warmup_lost\":" << warmup_lost
        << ",\"p50_ns\":" << percentile(one_way, 0.5) << ",\"p90_ns\":" << percentile(one_way, 0.9)
        << ",\"p99_ns\":" << percentile(one_way, 0.99) << ",\"p999_ns\":" << percentile(one_way, 0.999)
        << ",\"max_ns\":" << one_way.back() << ",\"mean_ns\":" << sum / static_cast<double>(one_way.size())
        << ",\"msgs_per_s\":" << static_cast<double>(iterations[i]) / elapsed
        << ",\"cpu_user_us\":" << cpu1.user_us - cpu0.user_us << ",\"cpu_sys_us\":" << cpu1.sys_us - cpu0.sys_us
        << ",\"peak_rss_kb\":" << shoal_perf::peak_rss_kb() << ",\"peer_cpu_user_us\":" << peer1.user_us - peer0.user_us
        << ",\"peer_cpu_sys_us\":" << peer1.sys_us - peer0.sys_us << ",\"peer_peak_rss_kb\":" << peer1.rss_kb << "}";
      shoal_perf::emit(o.str());
    }
    pong.RemoveReceiveCallback();
  }
  ponger.command("quit");
  std::fclose(ponger.in);
  int status = 0;
  waitpid(ponger.pid, &status, 0);
  eCAL::Finalize();
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
  {
    fail("the ponger exited with status " + std::to_string(status));
  }
  return 0;
}
}  // namespace

int main(int argc, char** argv)
{
  shoal_perf::json_stdout();
  shoal_perf::die_with_parent();
  const std::string pong_prefix = shoal_perf::arg(argc, argv, "--pong", "");
  if (!pong_prefix.empty())
  {
    pin(shoal_perf::arg(argc, argv, "--peer-cpu", ""));
    return run_pong(pong_prefix, shoal_perf::arg(argc, argv, "--unit", "shoal_perf_ecal_pong"));
  }
  return run_ping(argc, argv);
}
