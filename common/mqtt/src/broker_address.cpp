#include "broker_address.h"

#include <string_view>

namespace k8s4r::mqtt {

std::optional<BrokerAddress> broker_address(const std::string& url) {
  const std::size_t scheme_end = url.find("://");
  if (scheme_end == std::string::npos) return std::nullopt;
  const std::string_view scheme = std::string_view(url).substr(0, scheme_end);
  if (scheme != "tcp" && scheme != "ssl" && scheme != "mqtt" && scheme != "mqtts") return std::nullopt;
  std::string rest = url.substr(scheme_end + 3);
  rest = rest.substr(0, rest.find('/'));
  BrokerAddress address;
  if (!rest.empty() && rest.front() == '[') {  // [IPv6]:port
    const std::size_t close = rest.find(']');
    if (close == std::string::npos || close + 1 >= rest.size() || rest[close + 1] != ':') return std::nullopt;
    address = {rest.substr(1, close - 1), rest.substr(close + 2)};
  } else {
    const std::size_t colon = rest.rfind(':');
    if (colon == std::string::npos) return std::nullopt;
    address = {rest.substr(0, colon), rest.substr(colon + 1)};
  }
  if (address.host.empty() || address.port.empty()) return std::nullopt;
  return address;
}

}  // namespace k8s4r::mqtt
