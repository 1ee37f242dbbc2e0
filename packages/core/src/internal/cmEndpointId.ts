/**
 * What marks an endpoint, apart from internal/cmEndpoint.ts (its life) so that the checks of what
 * an entry point is given (internal/resourceGuard.ts) know one without importing its life.
 */
import * as Predicate from "effect/Predicate"
import type * as CmEndpoint from "../CmEndpoint.js"

export const TypeId: CmEndpoint.TypeId = Symbol.for("@effect-rdma/core/CmEndpoint") as CmEndpoint.TypeId

export const isCmEndpoint = (u: unknown): u is CmEndpoint.CmEndpoint => Predicate.hasProperty(u, TypeId)
