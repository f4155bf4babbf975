// The one tag space of narrows: every message's tag comes from a range reserved here, so that no
// two modules' messages can meet. A collective started at tag t (core/collectives.h) uses t, t + 1
// and t + 2 (kCollectiveSpan); whoever starts several at once spaces them by that span.
//
// Algorithms' tags lie below kAlgorithmEnd: a live roster (trainer/roster.cc) folds the step and a
// code of the collective's group above them, kLiveBase + ((step % kLiveSteps) * kLiveGroupCodes +
// code % kLiveGroupCodes) * kAlgorithmEnd + tag, so that a repeated collective (over fewer
// members) never meets its failed attempt, and survivors whose views differ miss each other. Deployment control (tools/) lies
// above everything the roster can make.
#pragma once

namespace narrows::core::tags {

constexpr int kCollectiveSpan = 3;

constexpr int kReduce = 100;        // trainer: WorkerContext::Reduce, one collective
constexpr int kJoin = 200;          // trainer: the shared state sent to joiners
constexpr int kBuffers = 250;       // trainer: a torchscript model's buffers averaged at a round's end
constexpr int kWelcome = 300;       // trainer: a live roster's welcome of restarted workers
constexpr int kSettleNotice = 301;  // trainer: a live roster's "my attempt at this collective failed"
constexpr int kSettleResult = 302;  // ... answered with the result by a member whose attempt succeeded
constexpr int kSettleView = 303;    // ... the coordinator's view of the group for the repeat

// The running entry's algorithm owns [kPrivateBegin, kAlgorithmEnd): each plug-in lays out its own
// tags inside it (Private(offset)), and core names none of them. Entries run one after another, so
// every entry has the whole range to itself.
constexpr int kPrivateBegin = 1000;
constexpr int kAlgorithmEnd = 4096;
constexpr int kPrivateSize = kAlgorithmEnd - kPrivateBegin;

// The tag at `offset` in the running entry's private range.
constexpr int Private(int offset) { return kPrivateBegin + offset; }

constexpr int kLiveBase = 1'000'000;
constexpr int kLiveSteps = 256;        // a live tag's step, modulo this
constexpr int kLiveGroupCodes = 512;   // ... and its group's code, modulo this
constexpr int kLiveEnd = kLiveBase + kLiveSteps * kLiveGroupCodes * kAlgorithmEnd;
constexpr int kDeployStart = 900'000'001;     // tools/cli/deploy_command.cc: the run starts
constexpr int kDeployPartSize = 900'000'002;  // a worker process's records: their size
constexpr int kDeployPart = 900'000'003;      // ... and the records
constexpr int kDeployAck = 900'000'004;       // the merging process has them

static_assert(kReduce + kCollectiveSpan <= kJoin && kJoin + kCollectiveSpan <= kBuffers &&
              kBuffers + kCollectiveSpan <= kWelcome && kSettleView < kPrivateBegin);
static_assert(kLiveEnd < kDeployStart);

}  // namespace narrows::core::tags
