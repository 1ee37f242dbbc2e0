// The host side of vm/pair's fault injection: connects to each VM's QMP monitor and to its control
// port (ttyS3 in the guest), and carries out what the guests ask for. Run by vm/pair; plain node,
// no dependencies.
//
//   node vm/pair-control.mjs <run-dir>     (<run-dir>/{a,b}.qmp and <run-dir>/{a,b}.control)
//
// Protocol on the control port, one line each way:
//   guest → host   <id> <verb> <vm> [<arg>]     vm: a, b, self or peer
//                  verbs: link <vm> on|off   (QMP set_link on the VM's NIC)
//                         stop <vm>           (QMP stop: the VM freezes, its clock too)
//                         cont <vm>           (QMP cont)
//                         ping <vm>           (QMP query-status)
//   host → guest   <id> ok [<detail>]   or   <id> error <message>
// Every action is logged on stderr with the time since the controller started. When a VM goes
// away, the other is resumed and its link restored, so that it can finish (and power off).
import { connect } from "node:net"
import { existsSync } from "node:fs"
import { join } from "node:path"

const dir = process.argv[2]
if (!dir) {
  console.error("usage: node vm/pair-control.mjs <run-dir>")
  process.exit(2)
}
const t0 = Date.now()
const log = (message) => console.error(`pair: +${((Date.now() - t0) / 1000).toFixed(3)}s ${message}`)

const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms))

/** Connects to a unix socket qemu creates once it has started; retries until it exists. */
const connectWhenReady = async (path, deadlineMs) => {
  const deadline = Date.now() + deadlineMs
  for (;;) {
    if (existsSync(path)) {
      const socket = await new Promise((resolve) => {
        const s = connect(path)
        s.once("connect", () => resolve(s))
        s.once("error", () => resolve(undefined))
      })
      if (socket) return socket
    }
    if (Date.now() > deadline) throw new Error(`${path}: qemu never opened it`)
    await sleep(50)
  }
}

/** Splits a socket's data into lines. */
const lines = (socket, onLine) => {
  let buffer = ""
  socket.setEncoding("utf8")
  socket.on("data", (chunk) => {
    buffer += chunk
    for (let i = buffer.indexOf("\n"); i >= 0; i = buffer.indexOf("\n")) {
      const line = buffer.slice(0, i).replace(/\r$/, "")
      buffer = buffer.slice(i + 1)
      if (line !== "") onLine(line)
    }
  })
}

class Vm {
  constructor(name) {
    this.name = name
    this.waiting = [] // resolvers of QMP commands in flight, in order
    this.queue = Promise.resolve()
    this.stopped = false
    this.linkDown = false
    this.gone = false
  }

  async open() {
    this.qmp = await connectWhenReady(join(dir, `${this.name}.qmp`), 120_000)
    lines(this.qmp, (line) => {
      const message = JSON.parse(line)
      if (message.QMP !== undefined || message.event !== undefined) return
      this.waiting.shift()?.(message)
    })
    this.qmp.on("close", () => this.goneAway())
    this.qmp.on("error", () => {})
    await this.execute("qmp_capabilities")
  }

  /** One QMP command at a time per VM; resolves with its return value or rejects with its error. */
  execute(command, args) {
    const run = () =>
      new Promise((resolve, reject) => {
        if (this.gone) return reject(new Error(`vm ${this.name} is gone`))
        this.waiting.push((message) =>
          message.error ? reject(new Error(`${message.error.class}: ${message.error.desc}`)) : resolve(message.return)
        )
        this.qmp.write(JSON.stringify(args ? { execute: command, arguments: args } : { execute: command }) + "\n")
      })
    const result = this.queue.then(run, run)
    this.queue = result.catch(() => {})
    return result
  }

  goneAway() {
    if (this.gone) return
    this.gone = true
    for (const w of this.waiting.splice(0)) w({ error: { class: "Gone", desc: `vm ${this.name} is gone` } })
    const other = vms[this.name === "a" ? "b" : "a"]
    if (!other.gone && (other.stopped || other.linkDown)) {
      log(`${this.name} is gone: resuming ${other.name} so that it can finish`)
      if (other.stopped) other.execute("cont").then(() => (other.stopped = false), () => {})
      if (other.linkDown) other.execute("set_link", { name: "nic", up: true }).then(() => (other.linkDown = false), () => {})
    }
  }
}

const vms = { a: new Vm("a"), b: new Vm("b") }

const perform = async (from, verb, target, arg) => {
  const vm = vms[target === "self" ? from : target === "peer" ? (from === "a" ? "b" : "a") : target]
  if (vm === undefined) throw new Error(`no vm '${target}'`)
  switch (verb) {
    case "link":
      if (arg !== "on" && arg !== "off") throw new Error("link needs on or off")
      await vm.execute("set_link", { name: "nic", up: arg === "on" })
      vm.linkDown = arg === "off"
      return `${vm.name} link ${arg}`
    case "stop":
      await vm.execute("stop")
      vm.stopped = true
      return `${vm.name} stopped`
    case "cont":
      await vm.execute("cont")
      vm.stopped = false
      return `${vm.name} running`
    case "ping":
      return `${vm.name} ${(await vm.execute("query-status")).status}`
    default:
      throw new Error(`unknown verb '${verb}'`)
  }
}

const serveControl = async (name) => {
  const socket = await connectWhenReady(join(dir, `${name}.control`), 120_000)
  socket.on("error", () => {})
  lines(socket, (line) => {
    const [id, verb, target, arg] = line.trim().split(/\s+/)
    perform(name, verb, target, arg).then(
      (detail) => {
        log(`${name} asked: ${verb} ${target}${arg ? " " + arg : ""} → ${detail}`)
        socket.write(`${id} ok ${detail}\n`)
      },
      (error) => {
        log(`${name} asked: ${line} → error: ${error.message}`)
        socket.write(`${id} error ${error.message}\n`)
      }
    )
  })
}

process.on("SIGTERM", () => process.exit(0))
try {
  await Promise.all([vms.a.open(), vms.b.open(), serveControl("a"), serveControl("b")])
  log("monitors and control ports connected")
} catch (error) {
  log(`FAILED: ${error.message}`)
  process.exit(1)
}
