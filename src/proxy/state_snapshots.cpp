#include "ratewall/proxy/state_snapshots.hpp"

#include <filesystem>

#include <system_error>

#include "ratewall/core/log.hpp"
#include "ratewall/limit/memory_store.hpp"

namespace ratewall {

state_snapshots::state_snapshots(std::shared_ptr<memory_store> store, std::string path,
                                 nanos interval, const clock& clk, std::string_view hash_key)
    : store_(std::move(store)),
      path_(std::move(path)),
      interval_(interval),
      clock_(clk),
      key_tag_(snapshot_key_tag(hash_key)) {
  metrics_ = process_metrics().add_provider([this](metric_writer& w) {
    w.family("ratewall_snapshot_writes_total",
             "Snapshots of the limit state written (store.snapshot), by result.",
             metric_type::counter);
    w.sample({{"result", "ok"}}, writes_ok_.load(std::memory_order_relaxed));
    w.sample({{"result", "failed"}}, writes_failed_.load(std::memory_order_relaxed));
    w.family("ratewall_snapshot_rows", "Rows of limit state in the last snapshot written.",
             metric_type::gauge);
    w.sample(rows_.load(std::memory_order_relaxed));
    w.family("ratewall_snapshot_last_write_timestamp_seconds",
             "When the last snapshot was written (Unix time; 0: none yet).", metric_type::gauge);
    w.sample(static_cast<double>(last_write_unix_ms_.load(std::memory_order_relaxed)) / 1000.0);
  });
}

state_snapshots::~state_snapshots() {
  stop();
}

snapshot_loaded state_snapshots::load() {
  const snapshot_loaded r = load_snapshot(*store_, path_, clock_.now(), key_tag_);
  keep_out_ = r.keep_out;
  if (!r.found) {
    log_info("store.snapshot: " + path_ + " does not exist yet: starting with no limit state");
  } else if (!r.problem.empty()) {
    log_error("store.snapshot: " + path_ + " ignored, starting with no limit state: " + r.problem);
  } else {
    std::string line = "store.snapshot: restored " + std::to_string(r.rows) + " rows from " +
                       path_ +
                       (r.age_ms >= 0 ? " (written " + std::to_string(r.age_ms / 1000) + " s ago)"
                                      : " (written " + std::to_string(-r.age_ms) +
                                            " ms ahead of this clock: it went back since)");
    if (r.changed + r.expired + r.full > 0) {
      line += "; dropped " + std::to_string(r.changed) + " of limits changed since, " +
              std::to_string(r.expired) + " lapsed, " + std::to_string(r.full) +
              " over store.max_keys";
    }
    log_info(line);
    if (r.other_key > 0) {
      log_warn("store.snapshot: dropped " + std::to_string(r.other_key) +
               " rows of API keys, users and descriptors, named under another hash key: set "
               "RATEWALL_HASH_KEY (the same at every start) for them to survive a restart");
    }
  }
  return r;
}

void state_snapshots::start() {
  std::lock_guard lock(mutex_);
  started_ = true;
  thread_ = std::thread([this] { run(); });
}

void state_snapshots::run() {
  std::unique_lock lock(mutex_);
  while (!stopping_) {
    if (wake_.wait_for(lock, interval_, [this] { return stopping_; })) {
      break;
    }
    lock.unlock();
    write();
    lock.lock();
  }
}

void state_snapshots::stop() {
  bool started = false;
  {
    std::lock_guard lock(mutex_);
    if (stopped_) {
      return;
    }
    stopped_ = true;
    stopping_ = true;
    started = started_;
  }
  wake_.notify_all();
  if (thread_.joinable()) {
    thread_.join();
  }
  if (started && write()) {
    log_info("store.snapshot: limit state written to " + path_);
  }
}

void state_snapshots::follow(std::shared_ptr<memory_store> store) {
  std::lock_guard lock(write_mutex_);
  if (store_ != nullptr && store == nullptr) {
    log_warn("store.snapshot: the store is no longer the memory store; " + path_ +
             " is kept as it is until a memory store is back");
  }
  store_ = std::move(store);
}

bool state_snapshots::write() {
  std::lock_guard lock(write_mutex_);
  if (store_ == nullptr) {
    return false;  // see follow()
  }
  if (keep_out_) {
    // Written again once the operator has moved the other file away.
    std::error_code ec;
    if (std::filesystem::symlink_status(path_, ec).type() !=
        std::filesystem::file_type::not_found) {
      writes_failed_.fetch_add(1, std::memory_order_relaxed);
      if (!keep_out_logged_) {
        keep_out_logged_ = true;
        log_error("store.snapshot: " + path_ +
                  " is not a snapshot (see the start's log): not replaced, and no snapshot is "
                  "written until it is moved away");
      }
      return false;
    }
    keep_out_ = false;
    log_info("store.snapshot: " + path_ + " was moved away: writing snapshots there again");
  }
  try {
    const snapshot_saved saved = save_snapshot(*store_, path_, clock_.now(), key_tag_);
    rows_.store(saved.rows, std::memory_order_relaxed);
    last_write_unix_ms_.store(
        std::chrono::duration_cast<std::chrono::milliseconds>(clock_.wall_now().time_since_epoch())
            .count(),
        std::memory_order_relaxed);
    writes_ok_.fetch_add(1, std::memory_order_relaxed);
    return true;
  } catch (const std::exception& e) {
    writes_failed_.fetch_add(1, std::memory_order_relaxed);
    // The file operations' errors name store.snapshot and the file already.
    log_error(std::string(e.what()) + "; the previous snapshot stays");
    return false;
  }
}

}  // namespace ratewall
