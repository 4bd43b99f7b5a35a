// The Agent: its parts built and wired together, start and shutdown.
#include "k8s4r/agent/agent.h"

#include "dispatch_intake.h"
#include "durability.h"
#include "k8s4r/agent/artifacts.h"
#include "k8s4r/agent/contact_lease.h"
#include "k8s4r/agent/state_store.h"
#include "k8s4r/common/duration.h"
#include "k8s4r/daemon/inbox.h"
#include "log_server.h"
#include "recovery.h"
#include "report_sender.h"
#include "retention.h"
#include "run_clock.h"
#include "session.h"
#include "task_lifecycle.h"
#include "work_dir.h"

#include <spdlog/spdlog.h>

namespace k8s4r::agent {

using namespace std::chrono_literals;

namespace {

#ifndef K8S4R_VERSION
#define K8S4R_VERSION "0.0.0"
#endif

// Bytes of received messages waiting for the loop at most; beyond, Paho's
// thread waits and the rest stay with the broker. Counted in bytes, not
// messages: a burst of small dispatches goes through in large batches (one
// commit each), while sixteen of the largest (256 KiB) fill it.
constexpr std::size_t kMaxWaitingBytes = 4 << 20;
// How long a shutdown waits for the broker to take the last reports.
constexpr auto kFlushTimeout = 5s;
// How long a hand-over waits for tasks that are starting (their pid not yet
// recorded) or being stopped (a stop the next agent would not know of).
constexpr auto kHandOverWait = 30s;

std::unique_ptr<StateStore> open_store(const AgentConfig& config) {
  auto store = StateStore::open(config.work_dir, config.max_queued_reports);
  if (!store) throw std::runtime_error(store.error().message);
  return std::make_unique<StateStore>(std::move(store).value());
}

// The robot's artifact store, or none: turned off, or its directory is
// unusable (it saves downloads; a robot without it still runs every task).
std::unique_ptr<ArtifactStore> open_artifact_store(const AgentConfig& config) {
  if (config.artifact_store_bytes == 0) return nullptr;
  try {
    return std::make_unique<ArtifactStore>(
        config.work_dir + "/artifacts", config.artifact_store_bytes,
        config.artifact_store_match == "checksum" ? ArtifactStore::Match::checksum : ArtifactStore::Match::url);
  } catch (const std::exception& unusable) {
    spdlog::error("{}: every artifact is downloaded, none kept", unusable.what());
    return nullptr;
  }
}

}  // namespace

// Declared in the order they are built; each refers only to those above it
// (and, through callbacks, to the agent's parts once all are built).
struct Agent::Parts {
  Parts(const AgentConfig& config, daemon::EventLoop& loop, const LinkFactory& make_link, const AgentHooks& hooks)
      : work_dir(config.work_dir),
        store(open_store(config)),
        run_clock(store->clock(), loop.clock()),
        inbox(kMaxWaitingBytes),
        contact(config.work_dir),
        link(make_link(link_events(loop))),
        durability(*store, loop,
                   {[this](const Result<void>& outcome) {
                      lifecycle.on_committed(outcome);
                      reports.drain();
                    },
                    [this] { session.tell_storage_state(); }}),
        reports(config, *store, durability, loop, *link),
        runner(hooks.make_runner ? hooks.make_runner(config, runner_events(loop))
                                 : make_shim_runner(config, runner_events(loop))),
        artifacts(open_artifact_store(config), config.work_dir + "/prefetch"),
        lifecycle(config, tasks, *store, durability, reports, *runner, artifacts, work_dir, run_clock, loop),
        retention(config, tasks, *store, durability, work_dir, run_clock, loop),
        intake(tasks, *store, lifecycle, retention, loop.clock()),
        recovery(config, tasks, *store, *runner, lifecycle, work_dir, loop.clock()),
        logs(config.robot_id, work_dir, loop, log_hooks()),
        session(config, loop, *link, robot_report(), session_listener(hooks, config.robot_id)) {}

  LogServer::Hooks log_hooks() {
    LogServer::Hooks log_hooks;
    log_hooks.publish = [this](const std::string& topic, const std::string& payload) {
      link->publish(topic, payload, 1, false, [](bool, const std::string&) {});
    };
    log_hooks.ended = [this](const std::string& uid) -> std::optional<bool> {
      const auto task = tasks.find(uid);
      if (task == tasks.end()) return std::nullopt;
      return !task->second.active();
    };
    return log_hooks;
  }

  SessionListener session_listener(const AgentHooks& hooks, const std::string& config_robot_id) {
    SessionListener listener;
    listener.log_request = [this](const std::string& payload) { logs.on_request(payload); };
    listener.up = [this] { reports.on_connected(); };
    listener.down = [this] { reports.on_disconnected(); };
    listener.registered = [this] { reports.on_bridge_back(); };
    listener.dispatch = [this](const std::string& payload) {
      intake.on_dispatch(payload);
      if (store->has_staged()) durability.request(false);  // a new epoch, if nothing else
    };
    listener.prefetch = [this, robot = config_robot_id](const std::string& payload) {
      if (payload.empty()) return;  // a retained list cleared: nothing to do
      auto wanted = parse_prefetch(payload);
      if (!wanted || wanted.value().robot_id != robot) {
        spdlog::warn("ignoring a list of artifacts to keep: {}",
                     wanted ? "it names robot " + wanted.value().robot_id : wanted.error().to_string());
        return;
      }
      artifacts.prefetch(std::move(wanted.value().artifacts));
    };
    listener.ack = [this](const Ack& ack) {
      intake.note_epoch(ack.epoch);
      reports.on_ack(ack);
      if (store->has_staged()) durability.request(false);  // a new epoch, if nothing else
    };
    listener.contact = [this](SteadyTime sent, std::uint64_t beat) {
      contact.heard(sent);
      lifecycle.on_contact(sent, beat);
    };
    listener.notify = hooks.notify;
    return listener;
  }

  mqtt::LinkEvents link_events(daemon::EventLoop& loop) {
    mqtt::LinkEvents events;
    events.connected = [this, &loop] { loop.post([this] { session.on_connected(); }); };
    events.connect_failed = [this, &loop](const std::string& cause) {
      loop.post([this, cause] { session.on_connect_failed(cause); });
    };
    events.connection_lost = [this, &loop](const std::string& cause) {
      loop.post([this, cause] { session.on_connection_lost(cause); });
    };
    events.message = [this, &loop](const std::string& topic, const std::string& payload) {
      const std::size_t bytes = topic.size() + payload.size();
      inbox.enter(bytes);  // Paho's thread waits here while the loop is behind
      loop.post([this, topic, payload, bytes] {
        inbox.leave(bytes);
        session.on_message(topic, payload);
      });
    };
    return events;
  }

  RunnerEvents runner_events(daemon::EventLoop& loop) {
    RunnerEvents events;
    events.started = [this, &loop](const std::string& uid, Result<TaskProcess> processes) {
      loop.post([this, uid, processes = std::move(processes)]() mutable {
        lifecycle.on_started(uid, std::move(processes));
        session.heartbeat_cadence_changed();  // its disconnect window may be the shortest now
      });
    };
    events.exited = [this, &loop](const TaskExit& exit) { loop.post([this, exit] { lifecycle.on_exit(exit); }); };
    events.signalled = [](const SignalAction& action, std::chrono::nanoseconds lateness) {
      spdlog::info("task {}: sent {} ({}), {} µs after its deadline", action.task_uid,
                   action.signal == SIGKILL ? "SIGKILL" : "SIGTERM", to_string(action.reason),
                   std::chrono::duration_cast<std::chrono::microseconds>(lateness).count());
    };
    return events;
  }

  RobotReport robot_report() {
    RobotReport report;
    report.artifacts = [this] { return artifacts.summary(kMaxArtifactsListed); };
    report.held_tasks = [this] {
      std::vector<RunningTask> held;
      for (const auto& [uid, task] : tasks) {
        RunningTask entry{uid, TaskRunState::running, task.last_seq > 0 ? std::optional(task.last_seq) : std::nullopt};
        if (task.last_report) entry.state = task.last_report->state;
        held.push_back(entry);
      }
      return held;
    };
    // Every task the robot holds and has not finished: one being fetched or
    // started, or waiting to restart, is not lost either.
    report.running_tasks = [this] {
      std::vector<std::string> running;
      for (const auto& [uid, task] : tasks) {
        if (task.active()) running.push_back(uid);
      }
      return running;
    };
    // Ended, with a final report the bridge has not confirmed yet (none
    // with a Go K8s4r server, which confirms nothing).
    report.ended_tasks = [this](bool& more) {
      more = false;
      if (!reports.end_to_end()) return std::vector<RunningTask>{};
      return store->unconfirmed_ends(kMaxEndedTasksListed, more);
    };
    report.storage_error = [this] { return durability.storage_error(); };
    report.knowledge = [this] { return RobotKnowledge{store->last_seq(), intake.newest_dispatch()}; };
    report.shortest_stop_window = [this] {
      std::optional<std::chrono::nanoseconds> shortest;
      for (const auto& [uid, task] : tasks) {
        if (!task.active()) continue;
        const auto window = lifecycle.stop_after_disconnect(task);
        if (window > std::chrono::nanoseconds::zero() && (!shortest || window < *shortest)) shortest = window;
      }
      return shortest;
    };
    return report;
  }

  WorkDir work_dir;
  std::unique_ptr<StateStore> store;
  RunClock run_clock;
  // Backpressure on received messages: a burst waits in the broker, not here.
  daemon::Inbox inbox;
  ContactLease contact;  // when the robot was last in contact with the bridge, for the shims and the lifecycle
  std::unique_ptr<mqtt::Link> link;
  TaskTable tasks;
  Durability durability;
  ReportSender reports;
  std::unique_ptr<TaskRunner> runner;
  ArtifactWorker artifacts;
  TaskLifecycle lifecycle;
  Retention retention;
  DispatchIntake intake;
  Recovery recovery;
  LogServer logs;
  Session session;
};

Agent::Agent(AgentConfig config, daemon::EventLoop& loop, LinkFactory make_link, AgentHooks hooks)
    : config_(std::move(config)), loop_(loop), hooks_(std::move(hooks)) {
  parts_ = std::make_unique<Parts>(config_, loop_, make_link, hooks_);
  parts_->lifecycle.on_finished = [this](AgentTask&) {
    parts_->retention.prune();
    if (shutting_down_) check_shutdown_progress();
  };
  parts_->lifecycle.next_beat = [this] { return parts_->session.next_beat(); };
  parts_->lifecycle.ask_for_contact = [this](std::uint64_t beat) {
    parts_->session.heartbeat_cadence_changed();  // a held task's window counts too
    parts_->session.ask_for_contact(beat);
  };
  parts_->reports.on_delivered = [this] {
    if (shutting_down_) check_shutdown_progress();
  };
}

Agent::~Agent() {
  loop_.cancel(hand_over_deadline_);
  loop_.cancel(hand_over_poll_);
  // The link's, the runner's and the downloads' threads stop before the
  // state they post to; a callback waiting for room in the inbox would hold
  // up the link's teardown.
  parts_->inbox.close();
  parts_->link.reset();
  parts_->runner.reset();
}

void Agent::start() {
  Parts& p = *parts_;
  p.recovery.restore();
  p.retention.start();
  if (hooks_.watchdog_interval) feed_watchdog();
  cap_logs_periodically();
  sample_logs_periodically();
  spdlog::info("agent {} for robot {}: {} task(s) from state.log, {} report(s) queued", K8S4R_VERSION, config_.robot_id,
               p.tasks.size(), p.store->queued_reports());
  p.session.connect();
}

void Agent::feed_watchdog() {
  if (hooks_.notify) hooks_.notify("WATCHDOG=1");
  loop_.after(*hooks_.watchdog_interval, [this] { feed_watchdog(); });
}

void Agent::cap_logs_periodically() {
  // A chatty task's logs are kept in bounds between heartbeats.
  if (shutting_down_) return;
  parts_->lifecycle.cap_logs();
  loop_.after(config_.heartbeat_interval, [this] { cap_logs_periodically(); });
}

void Agent::sample_logs_periodically() {
  // For a follower asking from a time (kubectl k8s4r logs --since).
  std::vector<std::string> running;
  for (const auto& [uid, task] : parts_->tasks) {
    if (task.phase == Phase::running) running.push_back(uid);
  }
  parts_->logs.sample(running);
  if (shutting_down_) return;
  loop_.after(1s, [this] { sample_logs_periodically(); });
}

void Agent::shutdown() {
  if (shutting_down_ && !(handing_over_ && !shutdown_finished_)) return;
  Parts& p = *parts_;
  if (handing_over_) {
    // A stop (systemctl stop, a removal) during a hand-over's wait wins: the
    // tasks are stopped and reported as on any stop; nothing will adopt them.
    handing_over_ = false;
    loop_.cancel(hand_over_deadline_);
    loop_.cancel(hand_over_poll_);
    spdlog::info("stopped while handing over: stopping the tasks instead");
  }
  shutting_down_ = true;
  p.inbox.close();  // a callback waiting for room must not hold up the disconnect
  spdlog::info("shutting down: stopping {} task(s)",
               std::count_if(p.tasks.begin(), p.tasks.end(), [](const auto& item) { return item.second.active(); }));
  if (hooks_.notify) hooks_.notify("STOPPING=1");
  p.retention.stop();
  p.lifecycle.stop_all();
  check_shutdown_progress();
}

void Agent::hand_over() {
  if (shutting_down_) return;
  shutting_down_ = true;
  handing_over_ = true;
  Parts& p = *parts_;
  // Off the broker at once: what arrives from now on (a dispatch, a cancel)
  // waits in the persistent session for the next agent, and reports queue in
  // state.log. The robot is not gone: a clean disconnect publishes no will.
  p.inbox.close();
  p.session.stop();
  p.link->disconnect(1s);
  p.retention.stop();
  // Long enough for the slowest stop under way to end (its killTimeout).
  const auto wait =
      std::max<std::chrono::nanoseconds>(kHandOverWait, p.lifecycle.longest_kill_timeout_in_transit() + 5s);
  const std::size_t moving = p.lifecycle.in_transit();
  spdlog::info("handing over to the next agent{}",
               moving == 0 ? std::string()
                           : " once " + std::to_string(moving) +
                                 " task(s) starting, stopping or waiting to restart are done (at most " +
                                 format_go_duration(wait) + ")");
  hand_over_deadline_ = loop_.after(wait, [this] { finish_hand_over(); });
  poll_hand_over();
}

void Agent::poll_hand_over() {
  // A start or a stop ends in an event of the runner's; looking every 100 ms
  // needs no hook in each.
  hand_over_poll_ = 0;
  check_shutdown_progress();
  if (handing_over_ && !shutdown_finished_) hand_over_poll_ = loop_.after(100ms, [this] { poll_hand_over(); });
}

void Agent::finish_hand_over() {
  if (shutdown_finished_ || !handing_over_) return;
  shutdown_finished_ = true;
  loop_.cancel(hand_over_deadline_);
  loop_.cancel(hand_over_poll_);
  Parts& p = *parts_;
  if (const std::size_t moving = p.lifecycle.in_transit(); moving > 0) {
    spdlog::warn(
        "handing over with {} task(s) still starting, stopping or waiting to restart: the next agent "
        "reports what it cannot take over failed (AgentRestarted)",
        moving);
  }
  spdlog::info("handing over: leaving {} running task(s) to their shims for the next agent",
               std::count_if(p.tasks.begin(), p.tasks.end(), [](const auto& item) { return item.second.active(); }));
  p.runner->release_all();
  if (p.store->finished_tasks() > 0) p.store->note_clock(p.run_clock.now());
  if (auto committed = p.durability.commit(); !committed) spdlog::error("{}", committed.error().message);
  exit_code_ = kHandOverExitCode;
  loop_.stop();
}

void Agent::check_shutdown_progress() {
  if (!shutting_down_ || shutdown_finished_) return;
  Parts& p = *parts_;
  if (handing_over_) {
    if (p.lifecycle.in_transit() == 0) finish_hand_over();
    return;
  }
  if (!p.lifecycle.all_finished()) return;  // waiting for exits
  if (!flush_deadline_) {
    flush_deadline_ = loop_.clock().steady() + kFlushTimeout;
    loop_.at(*flush_deadline_, [this] { finish_shutdown(); });
  }
  if (p.store->queued_reports() == 0 || !p.session.connected()) finish_shutdown();
}

void Agent::finish_shutdown() {
  if (shutdown_finished_) return;
  shutdown_finished_ = true;
  Parts& p = *parts_;
  // Acknowledgements not yet committed would only be resent after the
  // restart; committing them here spares the broker that. The run clock too,
  // so the time this agent ran counts towards the retention.
  if (p.store->finished_tasks() > 0) p.store->note_clock(p.run_clock.now());
  if (auto committed = p.durability.commit(); !committed) spdlog::error("{}", committed.error().message);
  if (p.store->queued_reports() > 0) {
    spdlog::warn("{} status report(s) not yet acknowledged; they stay queued on disk for the next start",
                 p.store->queued_reports());
  }
  const bool connected = p.session.connected();
  p.session.stop();
  if (!connected) {
    loop_.stop();
    return;
  }
  p.session.say_offline([this] {
    parts_->link->disconnect(2s);
    spdlog::info("disconnected; bye");
    loop_.stop();
  });
  loop_.after(3s, [this] {
    parts_->link->disconnect(1s);
    loop_.stop();
  });
}

}  // namespace k8s4r::agent
