// Internal to src/map: how mapper.cc reaches the designs, and the layout
// every design shares.
#pragma once

#include <memory>

#include "common/status.h"
#include "map/mapper.h"

namespace mapfs::map {

// Computes the header of an area of `area_len` bytes for `opt` (the largest
// block count that fits); EINVAL if nothing fits or an option is out of range.
Result<format::MapHeader> PlanLayout(uint64_t area_len, const FormatOptions& opt);

// Open a design over a validated header. Each scans what it keeps in DRAM
// (counters, the bitmap's shadow) and fails only on damage it cannot bear.
Result<std::unique_ptr<Mapper>> OpenHashFs(medium::Pool* pool, uint64_t area_off, const format::MapHeader& h);
Result<std::unique_ptr<Mapper>> OpenCuckoo(medium::Pool* pool, uint64_t area_off, const format::MapHeader& h);
Result<std::unique_ptr<Mapper>> OpenExtent(medium::Pool* pool, uint64_t area_off, const format::MapHeader& h);
Result<std::unique_ptr<Mapper>> OpenRadix(medium::Pool* pool, uint64_t area_off, const format::MapHeader& h);

}  // namespace mapfs::map
