// How deeply a JSON text nests, found without parsing it. nlohmann parses
// iteratively, but serialising, comparing and converting a value recurse
// once per level, so a deep enough document (a few hundred KB of `[`) ends
// the process on its stack. A parser of outside or stored JSON checks this
// first and refuses what nests deeper than it can ever need (the kube-sim's
// request bodies, the agent's state.log).
#pragma once

#include <cstddef>
#include <string_view>

namespace k8s4r {

// Far above any message or record of ours (a Task nests about 8 levels), far
// below what a thread's stack survives.
inline constexpr std::size_t kMaxProtocolJsonDepth = 64;

// True when `text` opens more than `limit` arrays or objects at once. Brackets
// inside strings do not count; malformed text is left to the parser.
bool json_nested_deeper_than(std::string_view text, std::size_t limit = kMaxProtocolJsonDepth);

}  // namespace k8s4r
