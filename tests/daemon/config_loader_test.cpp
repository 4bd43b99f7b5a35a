// The configuration loader every daemon shares: the order of sources, errors
// from all of them at once, and the value checks.
#include "k8s4r/daemon/config_loader.h"

#include "k8s4r/testing/temp_dir.h"

#include <gtest/gtest.h>

#include <fstream>
#include <utility>
#include <vector>

namespace k8s4r::daemon {
namespace {

using namespace std::chrono_literals;

struct Sample {
  std::string url = "tcp://default:1883";
  std::chrono::nanoseconds interval = 60s;
  std::map<std::string, std::string> labels;
  bool elect = true;
  bool legacy = false;
};

std::vector<Setting> table(Sample& s) {
  return {
      {"broker-url", ValueType::Url, "broker", [&s](const std::string& v) { return parse_broker_url(v, s.url); }},
      {"write-interval", ValueType::Duration, "interval",
       [&s](const std::string& v) { return parse_positive_duration(v, s.interval); }},
      {"labels", ValueType::KeyValues, "labels", [&s](const std::string& v) { return parse_labels(v, s.labels); }},
      {"leader-elect", ValueType::Bool, "elect", [&s](const std::string& v) { return parse_bool(v, s.elect); }},
      {"legacy-topics", ValueType::Bool, "legacy", [&s](const std::string& v) { return parse_bool(v, s.legacy); }},
  };
}

class ConfigLoaderTest : public ::testing::Test {
 protected:
  LoadOutcome load(Sample& sample, std::vector<std::string> args, std::map<std::string, std::string> env = {}) {
    return load_settings(
        Program{"k8s4r-sample", "k8s4r-sample: a test.", "1.2.3", (dir_.path() / "absent.yaml").string()},
        table(sample), args, [env](const std::string& name) {
          auto it = env.find(name);
          return it == env.end() ? std::string() : it->second;
        });
  }
  std::string file(const std::string& text) {
    const auto path = dir_.path() / "sample.yaml";
    std::ofstream(path) << text;
    return path.string();
  }
  testing::TempDir dir_;
};

TEST_F(ConfigLoaderTest, FlagsWinOverTheEnvironmentWhichWinsOverTheFile) {
  Sample sample;
  const std::string path = file("broker-url: tcp://file:1\nwrite-interval: 5s\nlabels:\n  zone: a\n");
  auto outcome = load(sample, {"--write-interval", "7s"},
                      {{"K8S4R_CONFIG", path}, {"K8S4R_BROKER_URL", "tcp://env:2"}, {"K8S4R_WRITE_INTERVAL", "6s"}});
  ASSERT_TRUE(outcome.run) << outcome.output;
  EXPECT_EQ(outcome.config_file, path);
  EXPECT_EQ(sample.url, "tcp://env:2");
  EXPECT_EQ(sample.interval, 7s);
  EXPECT_EQ(sample.labels, (std::map<std::string, std::string>{{"zone", "a"}}));
}

TEST_F(ConfigLoaderTest, EveryErrorFromEverySourceAtOnceAndNothingElse) {
  Sample sample;
  const std::string path = file("broker-url: http://x\nunknown: 1\nlabels: [a, b]\n");
  auto outcome = load(sample, {"--config", path, "--write-interval", "0s"}, {{"K8S4R_LABELS", "=x"}});
  ASSERT_FALSE(outcome.run);
  EXPECT_EQ(outcome.exit_code, 2);
  for (const std::string& expected :
       std::vector<std::string>{path + ": broker-url: must be tcp://", path + ": unknown setting 'unknown'",
                                path + ": labels: must be a single value", "K8S4R_LABELS: labels: must be k=v pairs",
                                "--write-interval: write-interval: must be more than 0"}) {
    EXPECT_NE(outcome.output.find(expected), std::string::npos) << expected << "\n" << outcome.output;
  }
}

TEST_F(ConfigLoaderTest, AFileThatIsNotAMappingOrNotYamlIsAnError) {
  for (const char* text : {"- a\n- b\n", "a: [\n", "{labels: {a: [1]}}\n"}) {
    Sample sample;
    auto outcome = load(sample, {"--config", file(text)});
    EXPECT_FALSE(outcome.run) << text;
    EXPECT_EQ(outcome.exit_code, 2) << text;
  }
  Sample sample;
  auto missing = load(sample, {"--config", (dir_.path() / "nope.yaml").string()});
  EXPECT_FALSE(missing.run);
  EXPECT_NE(missing.output.find("nope.yaml"), std::string::npos);
}

TEST_F(ConfigLoaderTest, HelpNamesEachVariableAndTypeAndVersionNamesTheProgram) {
  Sample sample;
  auto help = load(sample, {"--help"});
  EXPECT_FALSE(help.run);
  EXPECT_EQ(help.exit_code, 0);
  EXPECT_NE(help.output.find("K8S4R_WRITE_INTERVAL"), std::string::npos);
  EXPECT_NE(help.output.find("Usage: k8s4r-sample"), std::string::npos) << help.output;
  for (const char* typed : {"--write-interval duration", "--broker-url url", "--leader-elect bool", "--labels k=v,..."})
    EXPECT_NE(help.output.find(typed), std::string::npos) << typed << "\n" << help.output;
  EXPECT_EQ(help.output.find("TEXT"), std::string::npos) << help.output;
  EXPECT_EQ(load(sample, {"--version"}).output, "k8s4r-sample 1.2.3\n");
  EXPECT_EQ(load(sample, {"--nope"}).exit_code, 2);
}

// As pflag reads a Kubernetes daemon's bools: the switch alone is true,
// =false turns it off; the environment and the file take strconv.ParseBool's
// words.
TEST_F(ConfigLoaderTest, ABoolIsASwitchAloneOrTakesItsValueAfterAnEqualsSign) {
  {
    Sample sample;
    auto outcome = load(sample, {"--leader-elect=false", "--legacy-topics"});
    ASSERT_TRUE(outcome.run) << outcome.output;
    EXPECT_FALSE(sample.elect);
    EXPECT_TRUE(sample.legacy);
  }
  {
    Sample sample;
    auto outcome = load(sample, {"--legacy-topics", "--leader-elect", "--write-interval", "3s"});
    ASSERT_TRUE(outcome.run) << outcome.output;
    EXPECT_TRUE(sample.elect);
    EXPECT_TRUE(sample.legacy);
    EXPECT_EQ(sample.interval, 3s);
  }
  {
    Sample sample;  // the separate value a user may still write
    auto outcome = load(sample, {"--leader-elect", "false", "--legacy-topics", "true"});
    ASSERT_TRUE(outcome.run) << outcome.output;
    EXPECT_FALSE(sample.elect);
    EXPECT_TRUE(sample.legacy);
  }
  {
    Sample sample;
    auto outcome = load(sample, {}, {{"K8S4R_LEADER_ELECT", "False"}, {"K8S4R_LEGACY_TOPICS", "1"}});
    ASSERT_TRUE(outcome.run) << outcome.output;
    EXPECT_FALSE(sample.elect);
    EXPECT_TRUE(sample.legacy);
  }
  {
    Sample sample;
    auto outcome = load(sample, {"--config", file("leader-elect: false\nlegacy-topics: true\n")});
    ASSERT_TRUE(outcome.run) << outcome.output;
    EXPECT_FALSE(sample.elect);
    EXPECT_TRUE(sample.legacy);
  }
  for (const std::vector<std::string>& bad :
       std::vector<std::vector<std::string>>{{"--leader-elect=no"}, {"--leader-elect="}, {"--leader-elect", "maybe"}}) {
    Sample sample;
    auto outcome = load(sample, bad);
    EXPECT_FALSE(outcome.run) << bad.back();
    EXPECT_EQ(outcome.exit_code, 2);
    EXPECT_NE(outcome.output.find("true or false"), std::string::npos) << outcome.output;
    EXPECT_TRUE(sample.elect);  // unchanged
  }
}

TEST(ConfigValues, SizesRefuseWhatWouldOverflowOrIsNotANumber) {
  std::size_t size = 7;
  EXPECT_FALSE(parse_positive_size("10000", size));
  EXPECT_EQ(size, 10000u);
  for (const char* bad : {"", "0", "-1", "1e3", "12 ", "99999999999999999999999"}) {
    EXPECT_TRUE(parse_positive_size(bad, size)) << bad;
  }
  EXPECT_EQ(size, 10000u);
}

TEST(ConfigValues, BindAddressesNeedAHostAndAPortInRange) {
  std::string address;
  EXPECT_FALSE(parse_bind_address("127.0.0.1:9090", address));
  EXPECT_FALSE(parse_bind_address("[::1]:0", address));
  for (const char* bad : {"9090", ":9090", "host:", "host:65536", "host:80a", "host:123456"}) {
    EXPECT_TRUE(parse_bind_address(bad, address)) << bad;
  }
  EXPECT_EQ(address, "[::1]:0");
}

TEST(ConfigValues, ASecretFileGivesItsOneLineAndErrorsNeverShowItsContent) {
  testing::TempDir dir;
  const auto write = [&](const std::string& name, const std::string& content) {
    const auto path = (dir.path() / name).string();
    std::ofstream(path, std::ios::binary) << content;
    return path;
  };
  std::string secret;
  EXPECT_FALSE(parse_secret_file(write("token", "s3cr3t-token\r\n"), secret));
  EXPECT_EQ(secret, "s3cr3t-token");  // as `kubectl create secret --from-file` or an editor leaves it
  for (const auto& [name, content] :
       std::vector<std::pair<std::string, std::string>>{{"empty", ""},
                                                        {"blank", "\n"},
                                                        {"two-lines", "s3cr3t-one\ns3cr3t-two\n"},
                                                        {"huge", std::string(70'000, 's')}}) {
    const auto problem = parse_secret_file(write(name, content), secret);
    ASSERT_TRUE(problem) << name;
    EXPECT_EQ(problem->find("s3cr3t"), std::string::npos) << *problem;
    EXPECT_NE(problem->find(name), std::string::npos) << *problem;  // names the file
  }
  EXPECT_TRUE(parse_secret_file((dir.path() / "absent").string(), secret));
  EXPECT_TRUE(parse_secret_file(dir.path().string(), secret));  // a directory
  EXPECT_EQ(secret, "s3cr3t-token");                            // unchanged by every refusal
}

}  // namespace
}  // namespace k8s4r::daemon
