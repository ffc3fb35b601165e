// eCAL 6.1.1 C++ service server of `shoal perf --service --against ecal` (and of its mixed rows, shoal client ->
// eCAL server).
//
// Usage: shoal-ecal-svc-server --service NAME [--unit UNIT]
// Offers service NAME with method "echo": the response is the request (as large as it). Prints
// {"event":"ready","pid":P} once the server exists; on the line "stats" on stdin prints
// {"event":"stats","calls":N,"cpu_user_us":U,"cpu_sys_us":S,"peak_rss_kb":R} (totals since the start); exits 0 on
// "quit" or the end of stdin. Exit codes: 1 eCAL refused something, 2 bad arguments.

#include <ecal/ecal.h>

#include <atomic>
#include <iostream>
#include <string>

#include "common.h"

int main(int argc, char** argv)
{
  using namespace shoal_perf;
  json_stdout();
  die_with_parent();
  const std::string service = arg(argc, argv, "--service", "");
  if (service.empty())
  {
    fail("usage: shoal-ecal-svc-server --service NAME [--unit UNIT]", 2);
  }
  if (!eCAL::Initialize(arg(argc, argv, "--unit", "shoal_perf_ecal_server")))
  {
    fail("eCAL::Initialize failed");
  }
  std::atomic<long long> calls{0};
  {
    eCAL::CServiceServer server(service);
    eCAL::SServiceMethodInformation info;
    info.method_name = "echo";
    info.request_type.name = "shoal.perf.Bytes";
    info.request_type.encoding = "raw";
    info.response_type = info.request_type;
    const bool ok = server.SetMethodCallback(
        info, [&calls](const eCAL::SServiceMethodInformation&, const std::string& request, std::string& response) {
          response = request;
          calls.fetch_add(1, std::memory_order_relaxed);
          return 0;
        });
    if (!ok)
    {
      fail("SetMethodCallback(echo) failed");
    }
    emit("{\"event\":\"ready\",\"pid\":" + std::to_string(getpid()) + "}");
    std::string line;
    while (std::getline(std::cin, line) && line != "quit")
    {
      if (line == "stats")
      {
        emit("{\"event\":\"stats\",\"calls\":" + std::to_string(calls.load()) + "," + usage_fields() + "}");
      }
      else
      {
        emit("{\"event\":\"error\",\"error\":\"unknown command\"}");
      }
    }
  }
  eCAL::Finalize();
  return 0;
}
