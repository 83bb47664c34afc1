//===- braid-opt.cpp - mlir-opt for Braid's dialects and passes -----------===//

#include "compiler/Registration.h"

#include "mlir/IR/DialectRegistry.h"
#include "mlir/Tools/mlir-opt/MlirOptMain.h"

int main(int argc, char **argv) {
  mlir::DialectRegistry registry;
  braid::registerDialects(registry);
  braid::registerPasses();
  return mlir::asMainReturnCode(mlir::MlirOptMain(
      argc, argv, "Braid optimizer driver: runs Braid passes on .mlir files\n",
      registry));
}
