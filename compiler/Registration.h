//===- Registration.h - Dialects and passes of Braid ------------*- C++ -*-===//

#ifndef BRAID_COMPILER_REGISTRATION_H
#define BRAID_COMPILER_REGISTRATION_H

namespace mlir {
class DialectRegistry;
} // namespace mlir

namespace braid {
/// Adds every dialect a Braid module may hold to `registry`.
void registerDialects(mlir::DialectRegistry &registry);
/// Registers every Braid pass with the global pass registry (for
/// command-line pass pipelines such as braid-opt's).
void registerPasses();
} // namespace braid

#endif // BRAID_COMPILER_REGISTRATION_H
