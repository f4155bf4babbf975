// LiveRoster: a deployment's membership (roster.h) — heartbeats, survivors, restarts that rejoin.
// Its rounds, votes, welcomes and repeats without the dead are in live_roster.cc; settling a failed
// collective among the survivors (Settle, and the answers every member gives) in
// live_roster_settle.cc. Internal to trainer/; not thread-safe: one per worker.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <set>
#include <utility>
#include <vector>

#include "core/scenario.h"
#include "core/status.h"
#include "core/tags.h"
#include "core/transport.h"
#include "trainer/fault_plan.h"
#include "trainer/roster.h"

namespace narrows::trainer {

class LiveRoster final : public Roster {
 public:
  explicit LiveRoster(WorkerContext& w);

  bool live() const override { return true; }

  core::Status BeginRound(int64_t start, int64_t end, Round* round) override;
  void EndRound(const Round& round) override { group_ = round.members; }
  bool Present(int64_t start) override;
  bool Trains(int64_t step) override;
  std::vector<std::pair<int64_t, bool>> Departures(int64_t start, int64_t end) override;

  bool RestartsLostWorkers() const override { return false; }  // it is a new process already
  std::optional<int64_t> RecordedInnerSteps(int64_t) const override { return std::nullopt; }
  bool RecordedRepeat(int64_t) const override { return false; }

  int Tag(int base, int64_t step, const std::vector<int>& group) const override;
  // What a live tag folds above the algorithm's own tag: the step and the attempt's code, each modulo
  // its range (core/tags.h).
  static int64_t LiveKey(int64_t step, uint64_t code) {
    return (step % core::tags::kLiveSteps) * core::tags::kLiveGroupCodes +
           static_cast<int64_t>(code % core::tags::kLiveGroupCodes);
  }

  core::Status Run(std::vector<int>* group, int64_t step, core::OnFailure on_failure, const std::function<void()>& fill,
                   const std::function<core::Status(core::Transport&)>& collective, float* data, int64_t count) override;
  void Completed(const std::vector<int>& group, int64_t step, const float* data, int64_t count) override;
  void Attempting(const std::vector<int>& group, int64_t step) override { Begin(step, group); }
  core::Result<bool> Settle(const std::vector<int>& group, int64_t step, float* data, int64_t count) override;
  std::unique_ptr<core::Transport> Guard(const std::vector<int>& group) override;
  core::Status DropDead(std::vector<int>* group, int64_t step, core::OnFailure on_failure, const core::Status& why) override;

  void Vote(const std::vector<int>& group, float* slots) override;
  void CountVotes(const std::vector<int>& group, const float* slots) override;

  core::Result<Welcome> AwaitWelcome() override;
  void SetGroup(std::vector<int> group) override { group_ = std::move(group); }
  int64_t failures() const override { return failures_; }
  void set_failures(int64_t failures) override { failures_ = failures; }

 private:
  // Settling (Settle): a member whose attempt at a collective failed sends every live member a
  // notice naming the attempt (its step and its group's code) and waits for each one's answer about
  // that attempt: completed, with the result, or not. Notices and answers carry the step in their
  // tags and the attempt in their bytes, so that members whose views of the group differ (and so
  // made different attempts) still hear each other.
  struct Notice {
    int64_t step;
    uint64_t code;
  };
  struct AnswerHeader {
    int64_t step;
    uint64_t code;
    int64_t completed;  // 1: the result follows
  };

  // An attempt's code: its group's, and the coordinator's view count at its step.
  uint64_t AttemptCode(const std::vector<int>& group, int64_t step) const;
  static uint64_t GroupCode(const std::vector<int>& group);
  int NoticeTag(int64_t step) const { return SettleTag(kTagSettleNotice, step); }
  int ViewTag(int64_t step) const { return SettleTag(core::tags::kSettleView, step); }
  int AnswerTag(int64_t step) const { return SettleTag(kTagSettleResult, step); }
  // Settling's tags: the step alone (what they are about is in their bytes).
  int SettleTag(int base, int64_t step) const {
    return core::tags::kLiveBase + static_cast<int>(LiveKey(step, 0) * core::tags::kAlgorithmEnd) + base;
  }

  // Worker r's current process (as this one has heard it) is the member from now on.
  void TakeProcessOf(int r);

  // Whether the scenario's leave and join faults move worker `r` at all.
  bool Scheduled(int r) const;
  // Whether the scenario's schedule had `r` out before `step` and has it back then: the same process
  // returns, not a new one.
  bool ScheduledBack(int r, int64_t step) const;
  // The votes that name a joiner may come before its hello (they ride the data plane, the hello the
  // control plane, and its hello goes to each member on its own), and a member that started a moment
  // ago votes for the processes its rendezvous table lists until it finds them dead. A member that
  // took the joiner's generation before hearing its new process would hold the previous one's: it
  // would see the new process as a replacement at the first collective and fail that alone, while
  // the others wait for it. A leader that welcomed it then sent the welcome to the dead process
  // (lost), and the new one never heard it. So each member, the leader before it welcomes, waits
  // for the hello of a process other than the one the joiner was when last a member here,
  // answering settling members meanwhile, for at most deploy.timeout_s (a joiner with no new
  // process is then lost at the collective, at every member, and dropped).
  void AwaitJoiners(int64_t start_step);

  // The coordinator's view of the group for the repeat of attempt `attempt` at `step` (and its view
  // count, into *epoch); PeerUnavailable if the coordinator is lost first.
  core::Result<std::vector<int>> AwaitView(int coordinator, int64_t step, uint64_t attempt, int64_t* epoch);

  // A restarted worker that waits for its welcome has made no attempt at any collective: members
  // that counted it in their group (its welcome went astray: the leader had not heard this process
  // yet) and settle a failed attempt hear so at once, instead of waiting deploy.collective_timeout_s
  // for its answer. Its notices carry the step in their tags, which it does not know: every step's.
  void AnswerUnwelcomed();
  // Calls `on_notice(sender, notice)` for each notice queued under the tag of `step`.
  template <typename Fn>
  void TakeNotices(int64_t step, Fn&& on_notice);
  void Send(int dst, const AnswerHeader& h, const float* data, int64_t count);
  // The attempt this worker is making now: a notice about it waits for its end.
  void Begin(int64_t step, const std::vector<int>& group);
  // An attempt this worker gave up: the pieces of it queued here, and those that arrive late (from a
  // member that sent them before it failed, or a process that has died since), are dropped — before
  // each later attempt, for half the tags' step range — so that none meets a receive kLiveSteps
  // steps on, whose tag (step modulo kLiveSteps, the same group and view) would be the same.
  void Abandon(int64_t step, uint64_t code);
  // A restarted process drops, for its first kLiveSteps / 4 steps, whatever came under the tags of
  // the kLiveSteps / 2 steps before it joined: attempts it never made, whose pieces a member still
  // making one sent to it once it had replaced the member's old process (core::GroupGuard refuses
  // such sends; this catches one that raced the replacement). Nothing of its own is among them: it
  // takes part from the step it joined at, and its tags kLiveSteps / 4 steps on are not theirs yet.
  void Purge(int64_t step);
  void End(bool completed, const float* data, int64_t count);
  // Answers the notices of members settling an attempt: with the kept result if it is the last
  // collective this worker completed; not completed if this worker is not making it now (it failed
  // it, or never made it: its view differed); after its end if it is the one in progress. Before
  // each step, while a collective waits, and while settling step `settling` (notices about it too).
  void Answer(int64_t settling = -1);

  static constexpr int kTagSettleNotice = core::tags::kSettleNotice;
  static constexpr int kTagSettleResult = core::tags::kSettleResult;
  // The scenario's leave and join faults, which every process follows as the emulator does (its
  // crash faults are real deaths: CrashLayer in tools/cli/deploy_command.cc).
  static std::vector<core::FaultSpec> ScheduledFaults(const std::vector<core::FaultSpec>& faults);

  WorkerContext& w_;
  const FaultPlan scheduled_;
  std::set<int> left_by_schedule_;  // workers out by a scheduled leave (or join), their process the same
  std::vector<int> group_;    // this round's members
  std::vector<int> pending_;  // joiners of the next round, from the votes
  // The generation of each worker's process when it became a member (a restart is a new member).
  std::vector<int64_t> generations_;
  std::vector<bool> was_member_;  // whether each worker was a member here before
  int64_t failures_ = 0;  // collectives that failed so far (checkpoints keep it; no tag depends on it)
  // The result of the last collective this worker completed, for members whose attempt failed.
  std::vector<float> kept_;
  int64_t kept_step_ = -1;
  uint64_t kept_code_ = 0;
  struct Attempt {
    bool active = false;
    int64_t step = -1;
    uint64_t code = 0;
    std::vector<int> deferred;  // members whose notice about it waits for its end
    bool abandoned = false;     // a member said it failed this attempt
  } attempt_;
  // Views the coordinator gave at step epoch_step_ (each repeat of a collective after one).
  int64_t epoch_step_ = -1, epoch_ = 0;
  std::vector<std::pair<int64_t, uint64_t>> abandoned_;  // (step, code) of attempts given up, recent ones
  std::vector<std::pair<int64_t, uint64_t>> refused_;    // (step, code) of attempts a notice said failed
  int64_t joined_step_ = -1;  // a restarted process: the step it was welcomed at
};

}  // namespace narrows::trainer
