// One entry of a deployment across its ranks: the start signal, the training, and the gathering of
// every rank's records to rank 0, which writes them.
#include "tools/cli/deploy_entry.h"

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <vector>

#include "core/tags.h"
#include "tools/cli/run_command.h"

namespace narrows::tools {
namespace {

using core::Status;

// Tags of the run's own messages, above every tag an experiment can make (core/tags.h: below
// kLiveEnd, the live roster's folded tags included; asserted there).
constexpr int kTagStart = core::tags::kDeployStart;
constexpr int kTagPartSize = core::tags::kDeployPartSize;
constexpr int kTagPart = core::tags::kDeployPart;
constexpr int kTagAck = core::tags::kDeployAck;

// Sends this process's part of the entry to rank 0; rank 0 merges every live rank's.
Status Gather(deploy::ZmqTransport& t, trainer::Experiment& e, std::vector<int>* missing) {
  if (t.rank() != 0) {
    const std::string part = e.ExportPart();
    const uint64_t size = part.size();
    NARROWS_RETURN_IF_ERROR(t.Send(0, kTagPartSize, &size, sizeof size));
    return t.Send(0, kTagPart, part.data(), part.size());
  }
  for (int r = 1; r < t.world_size(); ++r) {
    uint64_t size = 0;
    Status s = t.Recv(r, kTagPartSize, &size, sizeof size);
    if (s.code() == core::StatusCode::kPeerUnavailable) {
      missing->push_back(r);  // died: its records died with it
      continue;
    }
    NARROWS_RETURN_IF_ERROR(s);
    if (size > (uint64_t{1} << 34)) return Status::InvalidArgument("rank " + std::to_string(r) + " sent an absurd part size");
    std::string part(size, '\0');
    NARROWS_RETURN_IF_ERROR(t.Recv(r, kTagPart, part.data(), part.size()));
    NARROWS_RETURN_IF_ERROR(e.MergePart(part));
  }
  e.GatherLeftoverSpools();  // what killed processes on this machine recorded before they died
  return Status::Ok();
}

}  // namespace

Status StartTogether(deploy::ZmqTransport& t, size_t entry) {
  int32_t index = static_cast<int32_t>(entry);
  if (t.rank() != 0) return t.Recv(0, kTagStart, &index, sizeof index);
  for (int r : t.Members()) {
    if (r != 0) NARROWS_RETURN_IF_ERROR(t.Send(r, kTagStart, &index, sizeof index));
  }
  return Status::Ok();
}

core::Result<nlohmann::json> RunEntry(trainer::Experiment& e, deploy::ZmqTransport& t, const std::string& entry_dir,
                                      core::Progress& progress) {
  e.SetProgress([&progress](int64_t steps, double wall_s, double loss) {
    char detail[96];
    std::snprintf(detail, sizeof detail, "wall %.1f s | loss %.3f", wall_s, loss);
    progress.Update(steps, detail);
  });
  const auto start = std::chrono::steady_clock::now();
  e.RunWorker(t.rank(), t);
  // A worker that failed (not one the others dropped) ends its process: the others see it leave.
  // Rank 0 first writes what the workers it can still reach recorded (Finish returns the error).
  if (t.rank() != 0) NARROWS_RETURN_IF_ERROR(e.status());
  std::vector<int> missing;
  NARROWS_RETURN_IF_ERROR(Gather(t, e, &missing));
  int32_t ack = 0;
  if (t.rank() != 0) {
    NARROWS_RETURN_IF_ERROR(t.Recv(0, kTagAck, &ack, sizeof ack));
    return nlohmann::json();
  }
  const double host_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  auto r = e.Finish(entry_dir);
  for (int m : t.Members()) {
    if (m != 0) (void)t.Send(m, kTagAck, &ack, sizeof ack);
  }
  if (!r.ok()) return r.status();
  char detail[160];
  std::snprintf(detail, sizeof detail, "val loss %.4f | %.1f s wall%s", r->final_val_loss, r->virtual_time_s,
                missing.empty() ? "" : (" | " + std::to_string(missing.size()) + " worker(s) lost").c_str());
  progress.Finish(detail);
  return EntryJson(*r, host_s);
}

}  // namespace narrows::tools
