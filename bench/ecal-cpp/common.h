// Shared by the eCAL 6.1.1 C++ service programs that `shoal perf --service --against ecal` measures beside shoal
// (built by scripts/ecal-cpp against the eclipse-ecal wheel's libecal_core.so.6).
//
// Both programs talk to `shoal perf` with one-line commands on stdin and one JSON object per line on stdout.
// eCAL's core may write to stdout itself, so json_stdout() moves file descriptor 1 to stderr and keeps a private
// duplicate of the original stdout for the JSON lines.

#pragma once

#include <sys/prctl.h>
#include <sys/resource.h>
#include <unistd.h>

#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>

namespace shoal_perf
{
inline FILE*& out_stream()
{
  static FILE* out = stdout;
  return out;
}

// Reserves the real stdout for JSON lines; whatever else writes to fd 1 goes to stderr.
inline void json_stdout()
{
  std::fflush(stdout);
  const int fd = dup(1);
  if (fd < 0 || dup2(2, 1) < 0)
  {
    std::perror("dup");
    std::exit(3);
  }
  out_stream() = fdopen(fd, "w");
  if (out_stream() == nullptr)
  {
    std::perror("fdopen");
    std::exit(3);
  }
}

// Makes the kernel end this process when its parent (`shoal perf`) dies.
inline void die_with_parent()
{
  if (prctl(PR_SET_PDEATHSIG, SIGKILL) != 0)
  {
    std::perror("prctl(PR_SET_PDEATHSIG)");
  }
  if (getppid() == 1)
  {
    std::exit(1);
  }
}

// Prints one JSON line (the caller builds the object text).
inline void emit(const std::string& json)
{
  std::fputs(json.c_str(), out_stream());
  std::fputc('\n', out_stream());
  std::fflush(out_stream());
}

// Reports an error as JSON and on stderr, then exits with `code`.
[[noreturn]] inline void fail(const std::string& msg, int code = 1)
{
  emit("{\"event\":\"error\",\"error\":\"" + msg + "\"}");
  std::fprintf(stderr, "error: %s\n", msg.c_str());
  std::exit(code);
}

// Peak resident set size (VmHWM) in kB, 0 if unreadable.
inline long long peak_rss_kb()
{
  std::ifstream status("/proc/self/status");
  std::string line;
  while (std::getline(status, line))
  {
    if (line.rfind("VmHWM:", 0) == 0)
    {
      return std::atoll(line.c_str() + 6);
    }
  }
  return 0;
}

// User and system CPU time of this process (all threads), in microseconds.
struct CpuTime
{
  long long user_us = 0;
  long long sys_us = 0;

  static CpuTime now()
  {
    rusage ru{};
    getrusage(RUSAGE_SELF, &ru);
    return CpuTime{static_cast<long long>(ru.ru_utime.tv_sec) * 1000000 + ru.ru_utime.tv_usec,
                   static_cast<long long>(ru.ru_stime.tv_sec) * 1000000 + ru.ru_stime.tv_usec};
  }
};

// `"cpu_user_us":U,"cpu_sys_us":S,"peak_rss_kb":R`: CPU time since `since`, peak RSS of the process.
inline std::string usage_fields(const CpuTime& since = CpuTime{})
{
  const CpuTime now = CpuTime::now();
  std::ostringstream s;
  s << "\"cpu_user_us\":" << now.user_us - since.user_us << ",\"cpu_sys_us\":" << now.sys_us - since.sys_us
    << ",\"peak_rss_kb\":" << peak_rss_kb();
  return s.str();
}

// The value after `--name` in argv, or `fallback`.
inline std::string arg(int argc, char** argv, const std::string& name, const std::string& fallback)
{
  for (int i = 1; i + 1 < argc; ++i)
  {
    if (name == argv[i])
    {
      return argv[i + 1];
    }
  }
  return fallback;
}
}  // namespace shoal_perf
