#include "core/all_gather.h"

namespace narrows::core {

Status AllGatherBlocks(Transport& t, float* slots, int64_t block, const std::vector<int>& group, int tag,
                       double timeout_s) {
  const size_t bytes = static_cast<size_t>(block) * sizeof(float);
  const float* mine = slots + static_cast<int64_t>(t.rank()) * block;
  for (int r : group) {
    if (r != t.rank()) NARROWS_RETURN_IF_ERROR(t.Send(r, tag, mine, bytes));
  }
  for (int r : group) {
    if (r != t.rank()) NARROWS_RETURN_IF_ERROR(t.Recv(r, tag, slots + static_cast<int64_t>(r) * block, bytes, timeout_s));
  }
  return Status::Ok();
}

Status AllGatherSizeOnly(Transport& t, int64_t bytes, const std::vector<int>& group, int tag, double timeout_s) {
  std::vector<SizeOnlyStep> steps;
  for (int r : group) {
    if (r != t.rank()) steps.push_back({true, r, tag, bytes});
  }
  for (int r : group) {
    if (r != t.rank()) steps.push_back({false, r, tag, 0});
  }
  return t.RunSizeOnly(steps, timeout_s);
}

}  // namespace narrows::core
