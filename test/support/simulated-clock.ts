/**
 * A simulated clock for the lease-maintenance timer (src/maintenance/timer.ts): idle minutes pass
 * in a loop instead of in real time.
 */
import type { MaintenanceClock } from "../../src/maintenance/timer.js";

export const MINUTE = 60_000;

/**
 * A clock the test moves: timers fire only when `advanceTo` passes their due time, in order, each
 * cycle finishing before the next timer is looked at.
 */
export class SimulatedClock implements MaintenanceClock {
  private timers: { at: number; run: () => void; id: number }[] = [];
  private nextId = 1;
  constructor(public t: number) {}
  now = () => this.t;
  setTimer = (run: () => void, delayMs: number) => {
    const id = this.nextId++;
    this.timers.push({ at: this.t + Math.max(0, delayMs), run, id });
    return id;
  };
  clearTimer = (id: unknown) => {
    this.timers = this.timers.filter((t) => t.id !== id);
  };
  get pending(): number[] {
    return this.timers.map((t) => t.at);
  }
  /** Moves to `time`, firing every timer due by then; `settle` waits for the cycle a timer started. */
  async advanceTo(time: number, settle: () => Promise<void>): Promise<number> {
    let fired = 0;
    for (;;) {
      const due = this.timers.filter((t) => t.at <= time).sort((a, b) => a.at - b.at)[0];
      if (!due) break;
      this.timers = this.timers.filter((t) => t !== due);
      this.t = Math.max(this.t, due.at);
      due.run();
      fired++;
      await settle();
    }
    this.t = Math.max(this.t, time);
    return fired;
  }
}
