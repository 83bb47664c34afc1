//===- TensorBoard.h - Scalars in TensorBoard's event files ----*- C++ -*-===//
//
// With --tensorboard-dir DIR, the trainer writes its per-step scalars into
// an event file that TensorBoard reads (it reads every file in a run
// directory whose name contains "tfevents"). The file is a sequence of
// TFRecords: the data's length (uint64, little-endian), the masked CRC32C of
// those 8 bytes, the data, and the masked CRC32C of the data, where
// mask(crc) = ((crc >> 15) | (crc << 17)) + 0xa282ead8. Each record's data
// is one serialized tensorflow.Event: wall_time (double, field 1), step
// (int64, field 2), file_version ("brain.Event:2", field 3, in the file's
// first event only) and a Summary (field 5) whose repeated Value (field 1)
// holds a tag (string, field 1) and a simple_value (float, field 2).
//
// The protobuf wire format is written out by hand here so that the runtime
// does not depend on TensorFlow's protos.
//
// A resumed run opens a new file in the same directory (TensorBoard reads a
// directory's files in name order, which the time in the names keeps in the
// order they were written). What the interrupted run wrote past its
// checkpoint is then there twice. TensorBoard's data server (--load_fast)
// keeps the newest points by step order on its own; its Python readers
// (EventAccumulator, the server with --load_fast=false) drop the older ones
// at a SessionLog START event (session_log, field 7, whose status, field 1,
// is START = 1): every point at that event's step and after read before it
// (EventAccumulator at every START; the server's from the second START of a
// run on, the first marking the run's start). So every run, fresh or
// resumed, writes START before its first step (AddSessionStart).
//
//===----------------------------------------------------------------------===//

#ifndef BRAID_RUNTIME_EXEC_TENSORBOARD_H
#define BRAID_RUNTIME_EXEC_TENSORBOARD_H

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"

#include <cstdint>
#include <memory>
#include <string>
#include <utility>

namespace braid::common {
class OutputFile;
} // namespace braid::common

namespace braid::exec {

/// CRC32C (Castagnoli: the reflected polynomial 0x82F63B78, initial value
/// and final xor 0xFFFFFFFF) of `data`.
uint32_t Crc32c(absl::string_view data);
/// Crc32c(data) masked as TFRecord stores it (the file comment's mask).
uint32_t MaskedCrc32c(absl::string_view data);

/// The serialized Event of `scalars` at `step` and `wallTime` (seconds since
/// the Unix epoch): one Summary with one Value per pair, in order, each
/// value rounded to float as simple_value is (NaN and infinities as they
/// are). Every field is written, zeros too.
std::string
EncodeScalarEvent(double wallTime, int64_t step,
                  absl::Span<const std::pair<std::string, double>> scalars);
/// The serialized Event that marks a run's start at `step`: wall_time, step
/// and a SessionLog whose status is START.
std::string EncodeSessionStartEvent(double wallTime, int64_t step);

/// One events file, written from one thread.
class TensorBoardWriter {
public:
  /// Creates `dir` (and its parents) when missing and a new events file in
  /// it, events.out.tfevents.<unix seconds>.<hostname>.<pid>.braid (with
  /// ".<n>" before ".braid" when that name is taken), and writes the
  /// file_version event. Errors name the directory or the file and say why
  /// (the system's reason): a path under a regular file, a directory that
  /// cannot be written.
  static absl::StatusOr<std::unique_ptr<TensorBoardWriter>>
  Open(const std::string &dir);

  TensorBoardWriter(const TensorBoardWriter &) = delete;
  TensorBoardWriter &operator=(const TensorBoardWriter &) = delete;
  /// Closes the file (Close's error, if any, is lost: call Close to see it).
  ~TensorBoardWriter();

  /// Appends one event holding `scalars` at `step`, stamped with the time
  /// now. An empty tag is an error. After a write fails, this and every
  /// later call return that failure and write nothing: a reader stops at a
  /// record that is cut short, so records after it would be lost anyway,
  /// and a run should not go on believing they were written.
  absl::Status
  AddScalars(int64_t step,
             absl::Span<const std::pair<std::string, double>> scalars);
  /// Marks the start of a run, fresh or resumed, before the scalars of its
  /// first step `step`: readers drop the points at `step` and after that
  /// earlier files hold (the file comment). Fails after a failed write as
  /// AddScalars does.
  absl::Status AddSessionStart(int64_t step);
  /// Hands what was written to the system (fflush, no fsync), so that a
  /// reader sees every complete event so far; a full disk shows here.
  absl::Status Flush();
  /// Flushes and closes the file; later calls fail.
  absl::Status Close();

  const std::string &path() const { return path_; }

private:
  TensorBoardWriter(std::string path, std::unique_ptr<common::OutputFile> file);
  /// Appends one record holding `data`.
  absl::Status writeRecord(absl::string_view data);

  std::string path_;
  /// Written in place; it keeps the first failure and returns it from every
  /// later call. Null once closed.
  std::unique_ptr<common::OutputFile> file_;
};

} // namespace braid::exec

#endif // BRAID_RUNTIME_EXEC_TENSORBOARD_H
