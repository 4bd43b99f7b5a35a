// The k8s4r-auth plugin's state file: what it was told, so a restarted
// broker lets robots in before any bridge is back. Append-only: each applied
// batch appends its records (login_table.h) in one write and one fdatasync
// before the bridge is answered, so an answered change is on disk. When the
// file holds more than twice the records its table needs (plus 10,000), it
// is rewritten whole beside itself and renamed over (compaction).
//
// Loading fails closed: a last line cut short by a crash is dropped; any
// other line that does not parse, or another version's header, loads
// nothing: the file is moved aside (<path>.corrupt) and the table starts
// empty, to be filled by the bridge's next full replace, which it sends on
// every connection. No robot gets in on a file the plugin cannot read.
//
// Thread-safety: none; the broker calls its plugins from its one thread.
#pragma once

#include "k8s4r/auth/login_table.h"
#include "k8s4r/common/result.h"

#include <cstddef>
#include <string>
#include <vector>

namespace k8s4r::auth {

struct Loaded {
  std::size_t records = 0;    // records read
  bool torn_tail = false;     // a last line without its newline, dropped
  std::string set_aside;      // the path a file that could not be read was moved to, "" when none
  std::string why_set_aside;  // what was wrong with it
};

class StateFile {
 public:
  explicit StateFile(std::string path) : path_(std::move(path)) {}
  ~StateFile();
  StateFile(const StateFile&) = delete;
  StateFile& operator=(const StateFile&) = delete;

  // Reads the file into `table` (which must be empty) and opens it for
  // appending; makes it when missing. Fails only when the file can be
  // neither read nor made (startup: the broker must not run without it).
  Result<Loaded> load(LoginTable& table);

  // Appends `records` in one write, then fdatasync. On failure (a full disk)
  // the file is cut back to its last whole record and the error returned.
  Result<void> append(const std::vector<logins::StateRecord>& records);

  // Whether the file holds enough dead records to be rewritten.
  bool wants_compaction(std::size_t live_records) const { return records_ > 2 * live_records + 10'000; }
  // Rewrites the file from `table`: <path>.tmp, fsync, rename, fsync of the
  // directory. The old file stays as it was when this fails.
  Result<void> compact(const LoginTable& table);

  std::size_t records() const { return records_; }
  const std::string& path() const { return path_; }

 private:
  Result<void> open_for_append();

  std::string path_;
  int fd_ = -1;
  std::size_t records_ = 0;  // in the file now
};

}  // namespace k8s4r::auth
