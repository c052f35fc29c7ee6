// chorus_torch._C — the Python face of the backend: ProcessGroupChorus as a subclass of
// torch.distributed.ProcessGroup (its collectives are torch's own bindings, dispatching to the
// overrides), and chorus's errors as Python exceptions carrying chorus's text.
#include <pybind11/chrono.h>
#include <torch/csrc/utils/pybind.h>

#include "chorus/error.h"
#include "process_group_chorus.h"

namespace py = pybind11;
using chorus::torch::ProcessGroupChorus;

PYBIND11_MODULE(_C, m) {
  m.doc() = "The chorus backend for torch.distributed (import chorus_torch to register it)";
  // torch's ProcessGroup and Store classes must be registered before they are named here.
  py::object process_group = py::module_::import("torch.distributed").attr("ProcessGroup");

  py::class_<ProcessGroupChorus, c10::intrusive_ptr<ProcessGroupChorus>>(
      m, "ProcessGroupChorus", process_group,
      "A torch.distributed process group over one chorus Communicator, set up through the "
      "c10d store that torch hands it.")
      .def(py::init([](const c10::intrusive_ptr<::c10d::Store>& store, int rank, int size,
                       std::chrono::milliseconds timeout) {
             return c10::make_intrusive<ProcessGroupChorus>(store, rank, size, timeout);
           }),
           py::arg("store"), py::arg("rank"), py::arg("size"),
           py::arg("timeout") = kProcessGroupDefaultTimeout,
           py::call_guard<py::gil_scoped_release>());

  // One Python class per chorus::ErrorKind that callers tell apart; chosen by kind, since chorus
  // may carry a failure as a plain chorus::Error of that kind.
  static py::exception<chorus::Error> error(m, "ChorusError", PyExc_RuntimeError);
  static py::exception<chorus::PeerFailure> peer_failure(m, "PeerFailure", error);
  static py::exception<chorus::Timeout> timeout(m, "Timeout", error);
  static py::exception<chorus::Mismatch> mismatch(m, "Mismatch", error);
  static py::exception<chorus::InvalidArgument> invalid_argument(
      m, "InvalidArgument", py::make_tuple(error, py::handle(PyExc_ValueError)));
  py::register_exception_translator([](std::exception_ptr p) {
    try {
      if (p) std::rethrow_exception(p);
    } catch (const chorus::Error& e) {
      switch (e.kind()) {
        case chorus::ErrorKind::kPeerFailure:
          peer_failure(e.what());
          break;
        case chorus::ErrorKind::kTimeout:
          timeout(e.what());
          break;
        case chorus::ErrorKind::kMismatch:
          mismatch(e.what());
          break;
        case chorus::ErrorKind::kInvalidArgument:
          invalid_argument(e.what());
          break;
        default:
          error(e.what());
          break;
      }
    }
  });
}
