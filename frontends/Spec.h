//===- Spec.h - Reading job files -------------------------------*- C++ -*-===//

#ifndef BRAID_FRONTENDS_SPEC_H
#define BRAID_FRONTENDS_SPEC_H

#include "frontends/spec/braid_spec.pb.h"

#include "llvm/ADT/StringRef.h"
#include "llvm/Support/Error.h"

namespace braid {

/// Parses a job in Protobuf text format. `filename` only names the source in
/// error messages, which read `FILE:LINE:COL: what is wrong`.
llvm::Expected<spec::JobSpec> parseJobText(llvm::StringRef text,
                                           llvm::StringRef filename);

/// Reads and parses a job file. Relative paths inside it (model.hf_config,
/// data.path, data.corpus, data.tokenizer_model) are made relative to the
/// file's directory.
llvm::Expected<spec::JobSpec> loadJobFile(llvm::StringRef path);

/// Success when `job` names where its model comes from (model.preset,
/// model.hf_config or model.family); otherwise an error that names the job
/// file `jobPath` and what it lacks, followed by `hint` (how else a tool
/// takes a model, e.g. its flags).
llvm::Error checkModelSource(const spec::JobSpec &job, llvm::StringRef jobPath,
                             llvm::StringRef hint = "");

/// The whole contents of a file, or an error naming the file.
llvm::Expected<std::string> readFile(llvm::StringRef path);

} // namespace braid

#endif // BRAID_FRONTENDS_SPEC_H
