// What kube-sim reads from a request before it knows who is asking: the
// path and query (RBAC attributes) and a --token-auth-file.
#include "k8s4r/kube_sim/authentication.h"
#include "k8s4r/kube_sim/rbac_authorizer.h"

#include <cstddef>
#include <cstdint>
#include <string>

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace k8s4r::kube_sim;
  const std::string input(reinterpret_cast<const char*>(data), size);
  (void)parse_token_file(input);
  const std::size_t split = input.find('?');
  std::multimap<std::string, std::string> query;
  if (split != std::string::npos) {
    const std::string rest = input.substr(split + 1);
    const std::size_t equals = rest.find('=');
    query.emplace(rest.substr(0, equals), equals == std::string::npos ? "" : rest.substr(equals + 1));
  }
  for (const char* method : {"GET", "POST", "DELETE", "PATCH"}) {
    (void)request_attributes(method, input.substr(0, split), query);
  }
  return 0;
}
