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
constexpr int kAsyncPush = 400;     // async-diloco: worker -> server, a pseudo-gradient
constexpr int kAsyncReply = 401;    // async-diloco: server -> worker, the global parameters
constexpr int kAsyncStop = 402;     // async-diloco: server -> worker, the budget is spent
constexpr int kGossip = 500;        // noloco: a pair's exchange of parameters
constexpr int kDdpBuckets = 1000;   // ddp: bucket b at kDdpBuckets + kCollectiveSpan * b
constexpr int kMaxDdpBuckets = 333;
constexpr int kModules = 2000;      // dipaco: unit u at kModules + kCollectiveSpan * u
constexpr int kMaxModules = 601;    // levels x modules <= 600, plus the shared unit
constexpr int kAlgorithmEnd = 4096;

constexpr int kLiveBase = 1'000'000;
constexpr int kLiveSteps = 256;        // a live tag's step, modulo this
constexpr int kLiveGroupCodes = 512;   // ... and its group's code, modulo this
constexpr int kLiveEnd = kLiveBase + kLiveSteps * kLiveGroupCodes * kAlgorithmEnd;
constexpr int kDeployStart = 900'000'001;     // tools/deploy_command.cc: the run starts
constexpr int kDeployPartSize = 900'000'002;  // a worker process's records: their size
constexpr int kDeployPart = 900'000'003;      // ... and the records
constexpr int kDeployAck = 900'000'004;       // the merging process has them

static_assert(kReduce + kCollectiveSpan <= kJoin && kJoin + kCollectiveSpan <= kWelcome &&
              kSettleView < kAsyncPush && kAsyncStop < kGossip && kGossip < kDdpBuckets);
static_assert(kDdpBuckets + kCollectiveSpan * kMaxDdpBuckets <= kModules);
static_assert(kModules + kCollectiveSpan * kMaxModules <= kAlgorithmEnd);
static_assert(kLiveEnd < kDeployStart);

}  // namespace narrows::core::tags
