// The stand-in's protobuf reader on arbitrary bytes (kubectl's typed
// clients' request bodies): malformed varints, lengths past the end, deep
// nesting and wrong wire types are refused, never crash.
#include "k8s4r/kube_sim/protobuf.h"

#include <cstddef>
#include <cstdint>
#include <string_view>

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view input(reinterpret_cast<const char*>(data), size);
  auto result = k8s4r::kube_sim::decode_protobuf(input);
  if (result.object) (void)result.object->dump();
  return 0;
}
