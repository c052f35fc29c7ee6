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

  // Subclasses after their base: pybind tries the translators registered last first.
  static py::exception<chorus::Error> error(m, "ChorusError", PyExc_RuntimeError);
  py::register_exception_translator([](std::exception_ptr p) {
    try {
      if (p) std::rethrow_exception(p);
    } catch (const chorus::Error& e) {
      error(e.what());
    }
  });
  py::register_exception<chorus::PeerFailure>(m, "PeerFailure", error.ptr());
  py::register_exception<chorus::Timeout>(m, "Timeout", error.ptr());
  py::register_exception<chorus::Mismatch>(m, "Mismatch", error.ptr());
  py::register_exception<chorus::InvalidArgument>(
      m, "InvalidArgument", py::make_tuple(error, py::handle(PyExc_ValueError)));
}
