#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "ratewall/admin/metrics.hpp"
#include "ratewall/core/clock.hpp"
#include "ratewall/limit/snapshot.hpp"

namespace ratewall {

class memory_store;

/// store.snapshot for the running gateway: reads the snapshot into the memory store at start,
/// then writes it every interval from a thread of its own and once more at stop (after the
/// drain, so the last requests are in it). A write that fails is logged and counted; the
/// previous snapshot stays, and the next interval tries again.
///
/// /metrics: ratewall_snapshot_writes_total{result}, ratewall_snapshot_rows (in the last one
/// written) and ratewall_snapshot_last_write_timestamp_seconds (alert on its age).
class state_snapshots {
 public:
  /// `path` as configured, resolved against the configuration file already.
  state_snapshots(std::shared_ptr<memory_store> store, std::string path, nanos interval,
                  const clock& clk, std::string_view hash_key);
  ~state_snapshots();

  state_snapshots(const state_snapshots&) = delete;
  state_snapshots& operator=(const state_snapshots&) = delete;

  /// Restores the file into the store and logs what it found; never throws for its content.
  /// A path that holds something else than a snapshot is never written to (write fails).
  snapshot_loaded load();
  /// Starts the writer thread.
  void start();
  /// Stops the thread and, when start() ran, writes a last snapshot: a start that failed
  /// never replaces a snapshot it may not even have read. Idempotent.
  void stop();
  /// Writes one now; false when it failed (logged).
  bool write();
  /// Snapshots the store a reload put in place from now on (a store whose settings changed is
  /// a new one; the old one empties as its last requests end). nullptr: the store is no longer
  /// a memory store, and nothing is written, the file kept as it is, until a reload or a
  /// restart brings one back.
  void follow(std::shared_ptr<memory_store> store);

  const std::string& path() const { return path_; }

 private:
  void run();

  std::shared_ptr<memory_store> store_;
  std::string path_;
  nanos interval_;
  const clock& clock_;
  std::uint64_t key_tag_;
  std::mutex write_mutex_;  // one write at a time (the thread's, the last one)
  std::mutex mutex_;        // stopping_
  std::condition_variable wake_;
  bool stopping_ = false;
  bool stopped_ = false;
  bool started_ = false;
  bool keep_out_ = false;         // load found something else at the path (under write_mutex_)
  bool keep_out_logged_ = false;  // its error was logged once
  std::thread thread_;
  std::atomic<std::uint64_t> writes_ok_{0};
  std::atomic<std::uint64_t> writes_failed_{0};
  std::atomic<std::uint64_t> rows_{0};
  std::atomic<std::int64_t> last_write_unix_ms_{0};
  metrics_provider_handle metrics_;
};

}  // namespace ratewall
