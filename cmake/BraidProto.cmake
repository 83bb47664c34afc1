# braid_proto_library(NAME PROTO) - a static library of the C++ generated from
# one .proto file; its header is included as "<dir of PROTO>/<name>.pb.h".
function(braid_proto_library name proto)
  get_filename_component(abs ${proto} ABSOLUTE)
  get_filename_component(base ${proto} NAME_WE)
  get_filename_component(abs_dir ${abs} DIRECTORY)
  file(RELATIVE_PATH rel_dir ${PROJECT_SOURCE_DIR} ${abs_dir})
  set(out_dir ${PROJECT_BINARY_DIR}/${rel_dir})
  set(src ${out_dir}/${base}.pb.cc)
  set(hdr ${out_dir}/${base}.pb.h)
  add_custom_command(
    OUTPUT ${src} ${hdr}
    COMMAND protobuf::protoc --cpp_out=${PROJECT_BINARY_DIR}
            -I${PROJECT_SOURCE_DIR} ${abs}
    DEPENDS ${abs} protobuf::protoc
    COMMENT "protoc ${rel_dir}/${base}.proto")
  add_library(${name} STATIC ${src})
  target_include_directories(${name} PUBLIC ${PROJECT_BINARY_DIR})
  target_link_libraries(${name} PUBLIC protobuf::libprotobuf)
  set_target_properties(${name} PROPERTIES POSITION_INDEPENDENT_CODE ON)
endfunction()
