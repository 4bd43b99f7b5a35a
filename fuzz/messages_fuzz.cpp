// Every MQTT payload codec, Go durations and RFC 3339 times on arbitrary
// bytes: none may crash, hang or leak; every answer is a value or an Error.
#include "k8s4r/common/duration.h"
#include "k8s4r/common/identifiers.h"
#include "k8s4r/common/messages.h"
#include "k8s4r/common/rfc3339.h"

#include <cstddef>
#include <cstdint>
#include <string_view>

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view input(reinterpret_cast<const char*>(data), size);
  (void)k8s4r::parse_register(input);
  (void)k8s4r::parse_heartbeat(input);
  (void)k8s4r::parse_register_response(input);
  (void)k8s4r::parse_dispatch(input);
  (void)k8s4r::parse_task_status(input);
  (void)k8s4r::parse_presence(input);
  (void)k8s4r::parse_go_duration(input);
  (void)k8s4r::parse_rfc3339(input);
  (void)k8s4r::validate_identifier(input);
  return 0;
}
