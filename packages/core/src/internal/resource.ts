/**
 * What every opaque resource's implementation shares: `pipe`, on the prototype (no cost per object).
 */
import { type Pipeable, pipeArguments } from "effect/Pipeable"

/** A base class whose instances are Pipeable. */
export abstract class PipeableBase implements Pipeable {
  pipe() {
    return pipeArguments(this, arguments)
  }
}
