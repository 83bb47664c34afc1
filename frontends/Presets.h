//===- Presets.h - Named model architectures --------------------*- C++ -*-===//

#ifndef BRAID_FRONTENDS_PRESETS_H
#define BRAID_FRONTENDS_PRESETS_H

#include "frontends/spec/braid_spec.pb.h"

#include "llvm/ADT/StringRef.h"

#include <optional>
#include <vector>

namespace braid {

/// The architecture of the published model `name` (see docs/spec.md for the
/// list and sources), or std::nullopt for an unknown name.
std::optional<spec::ModelSpec> lookupPreset(llvm::StringRef name);

/// Every preset name, in a stable order.
std::vector<std::string> presetNames();

} // namespace braid

#endif // BRAID_FRONTENDS_PRESETS_H
