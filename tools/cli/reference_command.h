// `narrows reference`: every declared scenario key (core/keys.h) as Markdown, in the order of a
// scenario file; docs/reference/scenario-keys.md is its output.
#pragma once

#include <string>

namespace narrows::tools {

std::string KeyReference();

}  // namespace narrows::tools
