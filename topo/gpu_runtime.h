// chorus — which GPUs the CUDA or HIP runtime shows this process, by PCI bus id.
//
// Asked through chorus's GPU runtime layer (chorus/gpu/runtime.h): the runtime chorus was built
// with, and none in a build without GPU support. Without a runtime, or without a device (a
// machine with no GPU or no driver), the list is empty and discovery numbers GPUs in PCI order.
#pragma once

#include <string>
#include <vector>

#include "chorus/topo/topology.h"

namespace chorus::topo {

struct RuntimeGpus {
  std::string runtime;                   // "CUDA", "HIP", or empty when none answered
  std::vector<std::string> pci_bus_ids;  // index = device ordinal, normalised by normalize_bus_id
};

RuntimeGpus query_runtime_gpus();

// "00000000:07:00.0", "0000:07:00.0" and "0000:07:00" all become "0000:07:00.0"; an
// unparsable id is returned lower-cased and otherwise unchanged.
std::string normalize_bus_id(const std::string& bus_id);

// load_xml() as a process would see that machine through `runtime`: GPUs the runtime does not
// show (CUDA_VISIBLE_DEVICES) are left out and the others take the runtime's ordinals, matched
// by PCI bus id. What discover() does with query_runtime_gpus() on the machine itself.
Topology load_xml_with_runtime(const std::string& path, const RuntimeGpus& runtime);

}  // namespace chorus::topo
