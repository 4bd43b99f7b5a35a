// Writes every valid example of proto-schemas/examples/ as the C++ codecs
// encode it, so tests/schema-check can check our output against the schemas.
// Usage: k8s4r_reencode_examples SCHEMA_DIR OUT_DIR
#include "example_codecs.h"

#include <iostream>

int main(int argc, char** argv) {
  namespace fs = std::filesystem;
  if (argc != 3) {
    std::cerr << "usage: " << argv[0] << " SCHEMA_DIR OUT_DIR\n";
    return 2;
  }
  const fs::path examples = fs::path(argv[1]) / "examples";
  const fs::path out = argv[2];
  fs::remove_all(out);
  int failures = 0;
  for (const auto& [message, codec] : k8s4r::testing::example_codecs()) {
    fs::create_directories(out / message);
    for (const auto& file : fs::directory_iterator(examples / message)) {
      if (file.path().filename().string().rfind("valid-", 0) != 0) continue;
      auto encoded = codec.parse_and_encode(k8s4r::testing::read_file(file.path()));
      if (!encoded) {
        std::cerr << message << "/" << file.path().filename().string() << ": " << encoded.error().to_string() << "\n";
        ++failures;
        continue;
      }
      std::ofstream(out / message / file.path().filename()) << encoded.value();
    }
  }
  return failures == 0 ? 0 : 1;
}
