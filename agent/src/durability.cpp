#include "durability.h"

#include <spdlog/spdlog.h>

namespace k8s4r::agent {

Durability::Durability(StateStore& store, daemon::EventLoop& loop, Listener listener)
    : store_(store), loop_(loop), listener_(std::move(listener)) {}

Durability::~Durability() { loop_.cancel(lazy_timer_); }

void Durability::request(bool urgent) {
  if (posted_) return;
  if (!urgent) {
    if (lazy_timer_ == 0) {
      lazy_timer_ = loop_.after(kLazyDelay, [this] {
        lazy_timer_ = 0;
        static_cast<void>(commit());
      });
    }
    return;
  }
  // Posted, so it runs after the work already waiting: every message of this
  // batch joins the same commit.
  posted_ = true;
  loop_.post([this] {
    if (posted_) static_cast<void>(commit());
  });
}

Result<void> Durability::commit() {
  posted_ = false;
  loop_.cancel(lazy_timer_);
  lazy_timer_ = 0;
  auto committed = store_.commit();
  if (!committed) {
    if (!failure_) {
      spdlog::error(
          "{}; no new task starts and reports go out from memory until it can be written (retrying every "
          "{}s)",
          committed.error().message, std::chrono::duration_cast<std::chrono::seconds>(kRetry).count());
    }
    const auto before = storage_error();
    failure_ = committed.error().message;
    if (storage_error() != before && listener_.storage_changed) listener_.storage_changed();
    lazy_timer_ = loop_.after(kRetry, [this] {
      lazy_timer_ = 0;
      static_cast<void>(commit());
    });
  } else if (failure_) {
    spdlog::info("the work dir is writable again; everything held in memory is stored");
    failure_.reset();
    if (listener_.storage_changed) listener_.storage_changed();
  }
  if (listener_.committed) listener_.committed(committed);
  return committed;
}

std::optional<StorageError> Durability::storage_error() const {
  if (!failure_) return std::nullopt;
  std::string message = *failure_;
  // At most kMaxStorageErrorMessageCharacters characters, cut between them.
  std::size_t characters = 0, end = 0;
  for (; end < message.size(); ++end) {
    if ((static_cast<unsigned char>(message[end]) & 0xC0) == 0x80) continue;
    if (++characters > kMaxStorageErrorMessageCharacters) break;
  }
  message.resize(end);
  return StorageError{store_.out_of_space() ? "StorageFull" : "StorageError", std::move(message)};
}

}  // namespace k8s4r::agent
