// The command line's shared pieces (tools/cli/main_args.h): exit statuses and the loading of a
// scenario with its overrides.
#include "tools/cli/main_args.h"

#include "trainer/script_model.h"

namespace narrows::cli {

int Fail(const Status& status) {
  std::fprintf(stderr, "narrows: %s\n", status.message().c_str());
  return status.code() == StatusCode::kInvalidArgument || status.code() == StatusCode::kNotFound
             ? kExitBadInput
             : kExitFailure;
}

int Done(const Status& s) { return s.ok() ? 0 : Fail(s); }

std::vector<std::string> ScenarioArgs::RunFolderSets() const {
  if (output.empty()) return {};
  std::string dir = output;
  while (dir.size() > 1 && dir.back() == '/') dir.pop_back();
  const auto slash = dir.rfind('/');
  const std::string parent = slash == std::string::npos ? "." : slash == 0 ? "/" : dir.substr(0, slash);
  return {"output.dir=" + parent, "name=" + (slash == std::string::npos ? dir : dir.substr(slash + 1))};
}

narrows::core::Result<narrows::core::Scenario> ScenarioArgs::Load() const {
  std::vector<std::string> all = sets;
  if (seeds > 0) all.push_back("seeds=" + std::to_string(seeds));
  for (auto& s : RunFolderSets()) all.push_back(std::move(s));
  auto overrides = narrows::core::ParseOverrides(all);
  if (!overrides.ok()) return overrides.status();
  if (launcher_world > 0) {
    narrows::core::Override world{"workers.count", std::to_string(launcher_world),
                                  "workers.count=" + std::to_string(launcher_world), "the launcher's world size"};
    world.only_where_auto = true;
    overrides->push_back(world);
  }
  auto scenario = narrows::core::LoadScenario(file, *overrides);
  // A model of the user's is loaded and tried once now: a bad file fails before anything runs.
  if (scenario.ok() && !scenario->model.torchscript.empty()) {
    NARROWS_RETURN_IF_ERROR(narrows::trainer::CheckScriptModel(scenario->model, scenario->train.precision));
    static bool noted = false;  // once a process, however many times the scenario is read
    if (const std::string note = noted ? "" : narrows::trainer::ScriptModelNote(scenario->model); !note.empty()) {
      std::fprintf(stderr, "note: %s\n", note.c_str());
    }
    noted = true;
  }
  return scenario;
}

}  // namespace narrows::cli
