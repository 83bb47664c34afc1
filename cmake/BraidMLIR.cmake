# Thin wrappers over add_mlir_* so that every dialect, pass library and tool
# is declared the same way, in one place.

# braid_dialect_tablegen(TARGET DIALECT PREFIX) - ops, attributes, enums and
# op interfaces of one dialect, generated from <PREFIX>Ops.td (which includes
# the others) and <PREFIX>Interfaces.td into <PREFIX>{Ops,Dialect,Attrs,Enums,Interfaces}.{h,cpp}.inc.
function(braid_dialect_tablegen target dialect prefix)
  set(LLVM_TARGET_DEFINITIONS ${prefix}Ops.td)
  mlir_tablegen(${prefix}Ops.h.inc -gen-op-decls)
  mlir_tablegen(${prefix}Ops.cpp.inc -gen-op-defs)
  mlir_tablegen(${prefix}Dialect.h.inc -gen-dialect-decls -dialect=${dialect})
  mlir_tablegen(${prefix}Dialect.cpp.inc -gen-dialect-defs -dialect=${dialect})
  mlir_tablegen(${prefix}Attrs.h.inc -gen-attrdef-decls -attrdefs-dialect=${dialect})
  mlir_tablegen(${prefix}Attrs.cpp.inc -gen-attrdef-defs -attrdefs-dialect=${dialect})
  mlir_tablegen(${prefix}Enums.h.inc -gen-enum-decls)
  mlir_tablegen(${prefix}Enums.cpp.inc -gen-enum-defs)
  # Interfaces are emitted only from the file that defines them.
  set(LLVM_TARGET_DEFINITIONS ${prefix}Interfaces.td)
  mlir_tablegen(${prefix}Interfaces.h.inc -gen-op-interface-decls)
  mlir_tablegen(${prefix}Interfaces.cpp.inc -gen-op-interface-defs)
  set(LLVM_TARGET_DEFINITIONS ${prefix}Ops.td)
  add_public_tablegen_target(${target})
  # Op documentation, generated from the ODS descriptions (target braid-doc).
  add_mlir_doc(${prefix}Ops ${prefix}Ops Dialects/ -gen-dialect-doc -dialect=${dialect})
endfunction()

# braid_tool(NAME SOURCES... LINK libs...) - a thin main() linked against
# exactly the libraries it names.
function(braid_tool name)
  cmake_parse_arguments(ARG "" "" "LINK" ${ARGN})
  add_llvm_executable(${name} ${ARG_UNPARSED_ARGUMENTS})
  target_link_libraries(${name} PRIVATE ${ARG_LINK})
  llvm_update_compile_flags(${name})
endfunction()
