/*
 * nrt.h — compatibility header: everything earlier versions of neuron-vfio's single nrt.h
 * declared. New code should include the libnrt header paths (<nrt/nrt.h>,
 * <nrt/nrt_experimental.h>, <nrt/nrt_version.h>, ...) directly.
 */
#pragma once

#include "nrt/nrt.h"
#include "nrt/nrt_experimental.h"
#include "nrt/nrt_version.h"
